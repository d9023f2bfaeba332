"""Small builders for the extended-resource tests (pods with resources, classes with timestamps)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from events.api.core_v1 import Container, Pod, PodSpec, ResourceRequirements
from events.api.loader import load_manifests
from events.api.meta import ObjectMeta
from events.api.resource_v1 import DeviceClass, DeviceClassSpec
from services.apiserver.admission import admit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "extended-resources"
REALWORLD = ROOT / "tests" / "data" / "realworld"


def device_class(name: str, ext: str | None = None, created: str | None = None) -> DeviceClass:
    return DeviceClass(
        metadata=ObjectMeta(name=name, creation_timestamp=created),
        spec=DeviceClassSpec(extended_resource_name=ext),
    )


def container(
    name: str,
    requests: Mapping[str, str | int] | None = None,
    limits: Mapping[str, str | int] | None = None,
    sidecar: bool = False,
) -> Container:
    return Container(
        name=name,
        resources=ResourceRequirements(
            requests={k: str(v) for k, v in (requests or {}).items()},
            limits={k: str(v) for k, v in (limits or {}).items()},
        ),
        restart_policy="Always" if sidecar else None,
    )


def pod(
    name: str = "p",
    containers: tuple[Container, ...] = (),
    init: tuple[Container, ...] = (),
    namespace: str = "default",
) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}"),
        spec=PodSpec(containers=containers, init_containers=init),
    )


def load(path: Path) -> list[object]:
    """Every document of a manifest file, decoded and admitted (defaults applied)."""
    out: list[object] = []
    for r in load_manifests(path):
        assert r.ok and r.obj is not None, r.error
        out.append(admit(r.obj))
    return out
