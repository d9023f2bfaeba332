"""examples/: the dra-example-driver demos load, and one walks the whole node path.

The walk-through stands in for the scheduler with a hand-written allocation (the scheduler service
is another package); everything else is the real deciders, kubelet manager and example driver.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.loader import load_manifests
from draflow.events.api.resource_v1 import ResourceClaim, ResourceClaimTemplate
from draflow.services.apiserver.admission import admit as api_admit
from draflow.services.claim_controller import CreateClaim, apply_to_claim, apply_to_pod, sync_claim, sync_pod
from draflow.services.dra.resourceclaim import DELETE_PROTECTION_FINALIZER, pod_consumer_ref
from draflow.services.drivers.gpu_example import GpuExamplePlugin, build_slices
from draflow.services.kubelet import (
    Admit,
    DRAManager,
    admit,
    prepare_pod,
    release_reservations,
    unprepare_pod,
)
from tests.builders import make_allocation
from tests.paths import ROOT

pytestmark = pytest.mark.kep4381

EXAMPLES = ROOT / "examples" / "dra-example-driver"
REALWORLD = ROOT / "tests" / "data" / "realworld" / "kubernetes-sigs__dra-example-driver"


def test_examples_are_the_upstream_demo_files() -> None:
    copies = {p.name for p in EXAMPLES.glob("*.yaml")} - {"deviceclass.yaml"}
    sources = {p.name for p in REALWORLD.glob("demo__examples__*.yaml")}
    assert len(copies) == len(sources) == 16
    for source in sources:
        copy = EXAMPLES / source.removeprefix("demo__examples__").replace("__", "--")
        assert copy.read_bytes() == (REALWORLD / source).read_bytes()
    shipped = ROOT / "services" / "drivers" / "gpu_example" / "deviceclass.yaml"
    assert (EXAMPLES / "deviceclass.yaml").read_bytes() == shipped.read_bytes()


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_document_is_admitted_except_podgroups(path: Path) -> None:
    for result in load_manifests(path):
        if not result.ok:
            assert 'no matches for kind "PodGroup"' in str(result.error)
            continue
        obj: Any = result.obj
        assert obj is not None
        api_admit(obj, namespace=obj.metadata.namespace or "default")


def _load(name: str) -> list:
    objs = []
    for i, result in enumerate(load_manifests(EXAMPLES / name)):
        loaded: Any = result.obj
        assert loaded is not None
        obj = api_admit(loaded, namespace=loaded.metadata.namespace or "default")
        objs.append(
            msgspec.structs.replace(obj, metadata=msgspec.structs.replace(obj.metadata, uid=f"uid-{i}"))
        )
    return objs


async def test_basic_resourceclaimtemplate_walks_the_node_path(tmp_path: Path) -> None:
    objs = _load("basic-resourceclaimtemplate--basic-resourceclaimtemplate.yaml")
    templates = [o for o in objs if isinstance(o, ResourceClaimTemplate)]
    pods = {o.metadata.name: o for o in objs if isinstance(o, Pod)}
    slices = build_slices("node-1", 8, 1, node_uid="uid-node-1")
    gpus = [d.name for d in slices[0].spec.devices]

    # Claim controller: one claim per pod from the template.
    claims: dict[str, ResourceClaim] = {}
    for name, pod in list(pods.items()):
        for action in sync_pod(pod, claims.values(), templates):
            if isinstance(action, CreateClaim):
                claim = action.to_claim()
                claims[action.name] = msgspec.structs.replace(
                    claim, metadata=msgspec.structs.replace(claim.metadata, uid=f"uid-{action.name}")
                )
            pods[name] = apply_to_pod(pods[name], action)
    assert len(claims) == 2

    # Scheduler stand-in: a GPU each, finalizer, reservation, binding.
    for i, (name, pod) in enumerate(sorted(pods.items())):
        claim_name = pod.status.resource_claim_statuses[0].resource_claim_name
        assert claim_name is not None
        claim = claims[claim_name]
        claims[claim_name] = msgspec.structs.replace(
            claim,
            metadata=msgspec.structs.replace(claim.metadata, finalizers=(DELETE_PROTECTION_FINALIZER,)),
            status=msgspec.structs.replace(
                claim.status,
                allocation=make_allocation(("gpu", gpus[i]), pool="node-1"),
                reserved_for=(pod_consumer_ref(pod),),
            ),
        )
        pods[name] = msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name="node-1"))

    # Kubelet + driver on node-1.
    by_uid = {c.metadata.uid: c for c in claims.values()}
    plugin = GpuExamplePlugin("node-1", tmp_path / "cdi", lambda ref: by_uid.get(ref.uid))
    plugins = {"gpu.example.com": plugin}
    manager = DRAManager()
    for pod in pods.values():
        decision = admit(pod, claims.values(), registered_drivers=plugins)
        assert isinstance(decision, Admit)
        assert (await prepare_pod(manager, pod, decision.claims, plugins)).ok
    pod0 = pods["pod0"]
    uid0 = claims[pod0.status.resource_claim_statuses[0].resource_claim_name or ""].metadata.uid
    assert manager.pod_cdi_devices(pod0) == {
        "ctr0": ["k8s.gpu.example.com/gpu=common", f"k8s.gpu.example.com/gpu={uid0}-gpu-0"]
    }

    # pod0 is deleted: unprepare, drop the reservation, then the claim controller cleans up.
    claim0 = next(c for c in claims.values() if c.metadata.uid == uid0)
    assert (await unprepare_pod(
        manager, pod0.metadata.uid, "basic-resourceclaimtemplate", [claim0.metadata.name], plugins
    )).ok
    release = release_reservations(pod0, claims.values())
    assert [type(a).__name__ for a in release] == ["RemoveReservedFor", "Deallocate", "RemoveFinalizer"]
    for action in release:
        claim0 = apply_to_claim(claim0, action)
    assert claim0.status.allocation is None and claim0.metadata.finalizers == ()
    del pods["pod0"]
    actions = sync_claim(claim0, pods.values())
    assert [type(a).__name__ for a in actions] == ["DeleteClaim"]
    assert plugin.prepared == {c.metadata.uid for c in claims.values()} - {uid0}
