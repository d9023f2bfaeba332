"""gpu.example.com: slices against dra-example-driver's dump, pool generations, the node plugin."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from draflow.events.api.loader import load_manifests
from draflow.events.api.resource_v1 import (
    DeviceAllocationConfiguration,
    DeviceClass,
    OpaqueDeviceConfiguration,
    ResourceClaim,
    ResourceSlice,
)
from draflow.services.apiserver.admission import admit as api_admit
from draflow.services.dra.kubeletplugin import DRAPlugin, PluginError
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers import cdi
from draflow.services.drivers.gpu_example import (
    DEVICE_CLASS_MANIFEST,
    FailureSwitches,
    GpuExamplePlugin,
    build_slices,
    gpu_uuid,
    sync_pool,
)
from draflow.services.drivers.gpu_example.config import ConfigError, parse_gpu_config
from draflow.services.drivers.kubeletplugin.faults import Faulty
from tests.builders import make_allocation, make_claim
from tests.paths import TESTS

pytestmark = pytest.mark.kep4381

DATA = TESTS / "data" / "realworld" / "kubernetes-sigs__dra-example-driver"
DUMP_NODE = "dra-example-driver-cluster-worker"
UUID = re.compile(r"^gpu-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _dump_slice() -> ResourceSlice:
    (result,) = load_manifests(DATA / "README.md.extract-resourceslice-list.yaml")
    assert result.ok, result.error
    assert isinstance(result.obj, ResourceSlice)
    return result.obj


def _without_uuid(slice_: ResourceSlice) -> list[dict]:
    devices = msgspec.to_builtins(slice_.spec.devices)
    for device in devices:
        device["attributes"].pop("uuid")
    return devices


def test_slices_have_the_dra_example_driver_shape() -> None:
    dump = _dump_slice()
    (ours,) = build_slices(DUMP_NODE, 8, 0, node_uid=dump.metadata.owner_references[0].uid)
    assert ours.spec.driver == dump.spec.driver == "gpu.example.com"
    assert ours.spec.node_name == dump.spec.node_name == DUMP_NODE
    assert ours.spec.pool == dump.spec.pool
    assert ours.metadata.generate_name == dump.metadata.generate_name
    assert ours.metadata.name.startswith(dump.metadata.generate_name) and len(ours.metadata.name) == len(
        dump.metadata.name
    )
    assert ours.metadata.owner_references == dump.metadata.owner_references
    # Same devices, attributes (types and values) and capacity; only the uuid values differ.
    assert _without_uuid(ours) == _without_uuid(dump)
    for device in ours.spec.devices:
        assert UUID.match(device.attributes["uuid"].string or "")


def test_slice_is_admitted_by_the_api_server_rules() -> None:
    (ours,) = build_slices("node-1", 8, 1, node_uid="uid-node-1")
    api_admit(ours)  # raises ApiError if any validation rule fails
    (unowned,) = build_slices("node-1", 8, 1)
    assert unowned.metadata.owner_references == ()


def test_uuids_are_deterministic_per_node_and_index() -> None:
    assert gpu_uuid("n1", 0) == gpu_uuid("n1", 0)
    assert len({gpu_uuid("n1", i) for i in range(8)} | {gpu_uuid("n2", i) for i in range(8)}) == 16


def test_more_than_128_gpus_make_a_pool_of_several_slices() -> None:
    slices = build_slices("big", 130, 0)
    assert [len(s.spec.devices) for s in slices] == [128, 2]
    assert {s.spec.pool.resource_slice_count for s in slices} == {2}
    assert len({s.metadata.name for s in slices}) == 2


def test_sync_pool_fresh_pool_starts_at_generation_one() -> None:
    plan = sync_pool("n1", 4, [])
    assert [s.spec.pool.generation for s in plan.create] == [1] and not plan.update and not plan.delete


def test_sync_pool_unchanged_pool_is_left_alone() -> None:
    published = sync_pool("n1", 4, []).create
    assert sync_pool("n1", 4, published).empty


def test_sync_pool_single_slice_change_updates_in_place_without_bump() -> None:
    published = sync_pool("n1", 4, []).create
    plan = sync_pool("n1", 6, published)
    (updated,) = plan.update
    assert not plan.create and not plan.delete
    assert updated.metadata.name == published[0].metadata.name
    assert updated.spec.pool.generation == 1 and len(updated.spec.devices) == 6


def test_sync_pool_growing_to_two_slices_bumps_the_generation() -> None:
    published = sync_pool("n1", 4, []).create
    plan = sync_pool("n1", 130, published)
    assert plan.generation == 2
    assert {s.spec.pool.generation for s in plan.create} == {2}
    # The old slice has other devices than either desired slice: replaced, not edited.
    assert plan.delete == published and not plan.update


def test_sync_pool_drops_slices_of_older_generations() -> None:
    old = build_slices("n1", 4, 1)
    new = build_slices("n1", 4, 2, taken={s.metadata.name for s in old})
    plan = sync_pool("n1", 4, old + new)
    assert plan.delete == old and not plan.create and not plan.update


def test_sync_pool_ignores_other_pools_and_drivers() -> None:
    other = build_slices("n2", 4, 1)
    foreign = msgspec.structs.replace(
        other[0], spec=msgspec.structs.replace(other[0].spec, driver="x.example.com")
    )
    plan = sync_pool("n1", 4, [*other, foreign])
    assert len(plan.create) == 1 and not plan.delete


def test_shipped_device_class_is_the_rendered_chart_class() -> None:
    (ours,) = load_manifests(DEVICE_CLASS_MANIFEST)
    rendered = [
        r
        for r in load_manifests(
            DATA / "deployments__helm__dra-example-driver__templates__deviceclass.rendered.yaml"
        )
    ]
    gpu = next(
        r.obj for r in rendered if isinstance(r.obj, DeviceClass) and r.obj.metadata.name == "gpu.example.com"
    )
    assert isinstance(ours.obj, DeviceClass) and ours.obj == gpu


# -- GpuConfig -----------------------------------------------------------------------------------


def test_gpu_config_defaults_and_validation() -> None:
    base = {"apiVersion": "gpu.resource.example.com/v1alpha1", "kind": "GpuConfig"}
    assert parse_gpu_config(base).strategy == "TimeSlicing"
    ts = parse_gpu_config(
        {**base, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}
    )
    assert ts.interval == "Long"
    sp = parse_gpu_config(
        {
            **base,
            "sharing": {"strategy": "SpacePartitioning", "spacePartitioningConfig": {"partitionCount": 10}},
        }
    )
    assert (sp.strategy, sp.partition_count) == ("SpacePartitioning", 10)
    with pytest.raises(ConfigError, match="unknown time-slice interval: Eternal"):
        parse_gpu_config(
            {**base, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Eternal"}}}
        )
    with pytest.raises(ConfigError, match="unknown GPU sharing strategy: Magic"):
        parse_gpu_config({**base, "sharing": {"strategy": "Magic"}})
    with pytest.raises(ConfigError, match='no kind "Other"'):
        parse_gpu_config({**base, "kind": "Other"})


# -- node plugin ---------------------------------------------------------------------------------


class Claims:
    def __init__(self, *claims: ResourceClaim) -> None:
        self.by_uid = {c.metadata.uid: c for c in claims}

    def __call__(self, ref: ClaimRef) -> ResourceClaim | None:
        return self.by_uid.get(ref.uid)


def ref(claim: ResourceClaim) -> ClaimRef:
    return ClaimRef(namespace=claim.metadata.namespace, uid=claim.metadata.uid, name=claim.metadata.name)


def plugin_for(
    tmp_path: Path, *claims: ResourceClaim, failures: FailureSwitches | None = None
) -> GpuExamplePlugin:
    return GpuExamplePlugin(
        "node-1", tmp_path / "cdi", Claims(*claims), state_dir=tmp_path / "plugin", failures=failures
    )


def test_plugin_satisfies_the_protocol_and_writes_the_common_spec(tmp_path: Path) -> None:
    plugin = plugin_for(tmp_path)
    assert isinstance(plugin, DRAPlugin)
    spec = cdi.read_spec(tmp_path / "cdi", "k8s.gpu.example.com-gpu_common")
    assert spec == {
        "cdiVersion": "0.3.0",
        "kind": "k8s.gpu.example.com/gpu",
        "devices": [
            {
                "name": "common",
                "containerEdits": {
                    "env": ["KUBERNETES_NODE_NAME=node-1", "DRA_RESOURCE_DRIVER_NAME=gpu.example.com"]
                },
            }
        ],
    }


def test_prepare_writes_the_claim_spec_and_returns_cdi_ids(tmp_path: Path) -> None:
    claim = make_claim("c", uid="0a1b", allocation=make_allocation(("gpu", "gpu-3")))
    plugin = plugin_for(tmp_path, claim)
    (result,) = plugin.node_prepare_resources([ref(claim)]).values()
    assert result.error == ""
    (device,) = result.devices
    assert (device.pool_name, device.device_name, device.request_names) == ("node-1", "gpu-3", ("gpu",))
    assert device.cdi_device_ids == ("k8s.gpu.example.com/gpu=common", "k8s.gpu.example.com/gpu=0a1b-gpu-3")
    spec = json.loads((tmp_path / "cdi" / "k8s.gpu.example.com-gpu_0a1b.json").read_text())
    assert spec["cdiVersion"] == "0.5.0"  # device name starts with a digit
    assert spec["devices"] == [
        {
            "name": "0a1b-gpu-3",
            "containerEdits": {
                "env": [
                    "GPU_DEVICE_GPU_3_RESOURCE_CLAIM=0a1b",
                    "DRA_ADMIN_ACCESS=false",
                    "GPU_DEVICE_3=gpu-3",
                    "GPU_DEVICE_3_SHARING_STRATEGY=TimeSlicing",
                    "GPU_DEVICE_3_TIMESLICE_INTERVAL=Default",
                ]
            },
        }
    ]
    assert plugin.prepared == {"0a1b"}


def test_prepare_applies_claim_configs_per_request(tmp_path: Path) -> None:
    def opaque(requests: tuple[str, ...], sharing: dict) -> DeviceAllocationConfiguration:
        params = {"apiVersion": "gpu.resource.example.com/v1alpha1", "kind": "GpuConfig", "sharing": sharing}
        return DeviceAllocationConfiguration(
            source="FromClaim",
            requests=requests,
            opaque=OpaqueDeviceConfiguration(driver="gpu.example.com", parameters=params),
        )

    configs = [
        opaque(("ts-gpu",), {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
        opaque(
            ("sp-gpu",), {"strategy": "SpacePartitioning", "spacePartitioningConfig": {"partitionCount": 10}}
        ),
    ]
    claim = make_claim(
        "c", uid="u1", allocation=make_allocation(("ts-gpu", "gpu-0"), ("sp-gpu", "gpu-1"), config=configs)
    )
    plugin = plugin_for(tmp_path, claim)
    plugin.node_prepare_resources([ref(claim)])
    spec = json.loads((tmp_path / "cdi" / "k8s.gpu.example.com-gpu_u1.json").read_text())
    envs = [d["containerEdits"]["env"] for d in spec["devices"]]
    assert "GPU_DEVICE_0_TIMESLICE_INTERVAL=Long" in envs[0]
    assert "GPU_DEVICE_1_SHARING_STRATEGY=SpacePartitioning" in envs[1]
    assert "GPU_DEVICE_1_PARTITION_COUNT=10" in envs[1]


def test_prepare_is_idempotent_and_survives_a_plugin_restart(tmp_path: Path) -> None:
    claim = make_claim("c", allocation=make_allocation(("gpu", "gpu-0")))
    first = plugin_for(tmp_path, claim).node_prepare_resources([ref(claim)])
    restarted = plugin_for(tmp_path, claim)
    assert restarted.prepared == {"uid-c"}
    assert restarted.node_prepare_resources([ref(claim)]) == first


def test_prepare_errors_per_claim(tmp_path: Path) -> None:
    unallocated = make_claim("a")
    foreign = make_claim("b", allocation=make_allocation(("gpu", "gpu-0"), pool="node-2"))
    unknown_device = make_claim("c", allocation=make_allocation(("gpu", "gpu-99")))
    bad_config = make_claim(
        "d",
        allocation=make_allocation(
            ("gpu", "gpu-0"),
            config=[
                DeviceAllocationConfiguration(
                    source="FromClaim",
                    opaque=OpaqueDeviceConfiguration(driver="gpu.example.com", parameters={"kind": "Nope"}),
                )
            ],
        ),
    )
    missing = make_claim("e")
    plugin = plugin_for(tmp_path, unallocated, foreign, unknown_device, bad_config)
    results = plugin.node_prepare_resources(
        [ref(c) for c in (unallocated, foreign, unknown_device, bad_config, missing)]
    )
    assert results["uid-a"].error.endswith("claim not yet allocated")
    assert results["uid-b"].error.endswith("requested device is not allocatable: gpu-0")
    assert results["uid-c"].error.endswith("requested device is not allocatable: gpu-99")
    assert "error decoding config parameters" in results["uid-d"].error
    assert results["uid-e"].error.endswith("ResourceClaim default/e not found")
    assert plugin.prepared == frozenset()


def test_failure_switches(tmp_path: Path) -> None:
    a = make_claim("a", allocation=make_allocation(("gpu", "gpu-0")))
    b = make_claim("b", allocation=make_allocation(("gpu", "gpu-1")))
    switches = FailureSwitches(prepare_claims={"a"}, prepare_devices={"gpu-1"}, fail_prepare_calls=1)
    plugin = Faulty(plugin_for(tmp_path, a, b, failures=switches), switches)
    with pytest.raises(PluginError, match="injected"):
        plugin.node_prepare_resources([ref(a)])
    results = plugin.node_prepare_resources([ref(a), ref(b)])
    assert "injected failure for claim a" in results["uid-a"].error
    assert "injected failure for device gpu-1" in results["uid-b"].error
    switches.prepare_claims.clear()
    switches.prepare_devices.clear()
    assert all(not r.error for r in plugin.node_prepare_resources([ref(a), ref(b)]).values())

    switches.unprepare_claims.add("uid-a")
    switches.fail_unprepare_calls = 1
    with pytest.raises(PluginError):
        plugin.node_unprepare_resources([ref(a)])
    out = plugin.node_unprepare_resources([ref(a), ref(b)])
    assert out["uid-a"] and out["uid-b"] is None
    assert plugin.prepared == {"uid-a"}
    assert [c[0] for c in plugin.calls] == ["prepare", "prepare", "prepare", "unprepare", "unprepare"]


def test_unprepare_removes_the_spec_and_is_idempotent(tmp_path: Path) -> None:
    claim = make_claim("c", allocation=make_allocation(("gpu", "gpu-0")))
    plugin = plugin_for(tmp_path, claim)
    plugin.node_prepare_resources([ref(claim)])
    spec = tmp_path / "cdi" / "k8s.gpu.example.com-gpu_uid-c.json"
    assert spec.exists()
    assert plugin.node_unprepare_resources([ref(claim)]) == {"uid-c": None}
    assert not spec.exists()
    assert plugin.node_unprepare_resources([ref(claim)]) == {"uid-c": None}
