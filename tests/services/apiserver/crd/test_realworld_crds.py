"""Real drivers' CRDs load into the apiserver, and their example objects then apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from draflow.services.runtime.client import ApiClient
from tests.paths import DATA, REALWORLD

pytestmark = pytest.mark.kep4381

CRDS = DATA / "crds"


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and "kind" in d]


async def test_compute_domain_crd_then_its_demo_object(api: ApiClient) -> None:
    demo = docs(REALWORLD / "NVIDIA__k8s-dra-driver-gpu" / "demo__specs__imex__channel-injection-all.yaml")
    domain = [d for d in demo if d["kind"] == "ComputeDomain"]
    (refused,) = await api.apply(domain)
    assert refused.error is not None and 'no matches for kind "ComputeDomain"' in refused.error.message

    crd = docs(CRDS / "NVIDIA__k8s-dra-driver-gpu__resource.nvidia.com_computedomains.yaml")
    (loaded,) = await api.apply(crd)
    assert loaded.error is None, loaded.error
    (applied,) = await api.apply(domain)
    assert applied.error is None, applied.error
    stored = await api.get("computedomains", "imex-channel-injection-all")
    # the schema's default, and no status on create (status subresource)
    assert stored["spec"]["channel"] == {
        "allocationMode": "All",
        "resourceClaimTemplate": {"name": "tpl-imex-channels"},
    }
    assert "status" not in stored
    changed = {**domain[0], "spec": {**domain[0]["spec"], "numNodes": 2}}
    (immutable,) = await api.apply([changed])
    assert immutable.error is not None
    assert immutable.error.message.endswith(
        'spec: Invalid value: "object": A computeDomain.spec is immutable'
    )
    no_mode = {
        **domain[0],
        "metadata": {"name": "single"},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "t"}}},
    }
    (defaulted,) = await api.apply([no_mode])
    assert defaulted.error is None
    assert (await api.get("computedomain", "single"))["spec"]["channel"]["allocationMode"] == "Single"
    bad = {
        **no_mode,
        "metadata": {"name": "bad"},
        "spec": {
            "numNodes": 0,
            "channel": {"allocationMode": "Some", "resourceClaimTemplate": {"name": "t"}},
        },
    }
    (refused,) = await api.apply([bad])
    assert refused.error is not None
    assert refused.error.message.endswith(
        'spec.channel.allocationMode: Unsupported value: "Some": supported values: "All", "Single"'
    )


async def test_scheduler_plugins_pod_group_crd_then_its_readme_object(api: ApiClient) -> None:
    (loaded,) = await api.apply(
        docs(CRDS / "kubernetes-sigs__scheduler-plugins__scheduling.x-k8s.io_podgroups.yaml")
    )
    assert loaded.error is None, loaded.error
    example = docs(
        CRDS / "kubernetes-sigs__scheduler-plugins__pkg__coscheduling__README.md.extract-podgroup.yaml"
    )
    (applied,) = await api.apply(example)
    assert applied.error is None, applied.error
    assert (await api.get("pg", "nginx"))["spec"] == {"scheduleTimeoutSeconds": 10, "minMember": 3}
    quantities = {
        **example[0],
        "metadata": {"name": "q"},
        "spec": {"minMember": 1, "minResources": {"cpu": 2, "memory": "1Gi"}},
    }
    (ok,) = await api.apply([quantities])
    assert ok.error is None, ok.error
    wrong = {**quantities, "metadata": {"name": "w"}, "spec": {"minResources": {"memory": "lots"}}}
    (refused,) = await api.apply([wrong])
    assert refused.error is not None
    assert (
        'spec.minResources.memory: Invalid value: "lots": spec.minResources.memory in body should match'
        in (refused.error.message)
    )
