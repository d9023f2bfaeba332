"""Kubelet DRA manager with the example driver: batching, sharing, retries, CDI ids, checkpoint."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.services.dra.kubeletplugin import Device, PluginError, PrepareResult
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers.gpu_example import GpuExamplePlugin
from draflow.services.drivers.kubeletplugin.faults import FailureSwitches, Faulty
from draflow.services.kubelet import (
    ClaimInfo,
    CorruptCheckpointError,
    DeviceState,
    DRAManager,
    ManagerError,
    decode_checkpoint,
    encode_checkpoint,
    prepare_pod,
    read_checkpoint,
    unprepare_pod,
    write_checkpoint,
)
from draflow.services.kubelet.checkpoint import CheckpointError
from tests.builders import make_allocation, make_claim, make_container, make_pod

pytestmark = pytest.mark.kep4381

COMMON = "k8s.gpu.example.com/gpu=common"


class Env:
    """One node: its claims (the driver's view of the API), the example plugin, the manager."""

    def __init__(
        self, tmp_path: Path, *claims: ResourceClaim, failures: FailureSwitches | None = None
    ) -> None:
        self.tmp = tmp_path
        self.claims = {c.metadata.uid: c for c in claims}
        switches = failures or FailureSwitches()
        driver = GpuExamplePlugin(
            "node-1",
            tmp_path / "cdi",
            lambda ref: self.claims.get(ref.uid),
            state_dir=tmp_path / "plugin",
            failures=switches,
        )
        self.plugin = Faulty(driver, switches)
        self.plugins: dict[str, Any] = {"gpu.example.com": self.plugin}
        self.manager = DRAManager()

    def prepare(self, pod: Pod, *claims: ResourceClaim, attempts: int = 3):
        return prepare_pod(self.manager, pod, list(claims), self.plugins, attempts=attempts)

    def unprepare(self, pod: Pod, *names: str, attempts: int = 3):
        return unprepare_pod(
            self.manager, pod.metadata.uid, pod.metadata.namespace, names, self.plugins, attempts=attempts
        )


def shared_setup(tmp_path: Path):
    claim = make_claim(
        "shared", uid="c1", allocation=make_allocation(("gpu", "gpu-0")), reserved_for=["p0", "p1"]
    )
    pods = [make_pod(f"p{i}", claims={"gpu": "shared"}, node_name="node-1") for i in range(2)]
    return Env(tmp_path, claim), claim, pods


async def test_shared_claim_is_prepared_once_and_unprepared_with_the_last_pod(tmp_path: Path) -> None:
    env, claim, (p0, p1) = shared_setup(tmp_path)
    assert (await env.prepare(p0, claim)).ok
    assert (await env.prepare(p1, claim)).ok
    assert list(env.plugin.calls) == [("prepare", ("c1",))]
    assert env.manager.get("default", "shared").pod_uids == {"uid-p0", "uid-p1"}

    assert (await env.unprepare(p0, "shared")).ok
    assert list(env.plugin.calls) == [("prepare", ("c1",))]  # still used by p1
    assert not env.manager.has_pod_reference("uid-p0") and env.manager.has_pod_reference("uid-p1")

    assert (await env.unprepare(p1, "shared")).ok
    assert env.plugin.calls[-1] == ("unprepare", ("c1",))
    assert env.manager.get("default", "shared") is None
    assert not (tmp_path / "cdi" / "k8s.gpu.example.com-gpu_c1.json").exists()
    assert (await env.unprepare(p1, "shared")).ok and len(env.plugin.calls) == 2  # idempotent


async def test_one_call_per_driver_with_all_its_claims(tmp_path: Path) -> None:
    class OtherDriver:
        """A second driver that prepares anything, recording its batches."""

        driver_name = "net.example.com"

        def __init__(self) -> None:
            self.batches: list[tuple[str, ...]] = []

        def node_prepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
            self.batches.append(tuple(c.uid for c in claims))
            return {
                c.uid: PrepareResult(devices=(Device(pool_name="node-1", device_name="nic-0"),))
                for c in claims
            }

        def node_unprepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, str | None]:
            return {c.uid: None for c in claims}

    mixed = make_claim("a", allocation=make_allocation(("gpu", "gpu-0"), ("nic", "nic-0", "net.example.com")))
    gpu_only = make_claim("b", allocation=make_allocation(("gpu", "gpu-1")))
    env = Env(tmp_path, mixed, gpu_only)
    other = OtherDriver()
    env.plugins["net.example.com"] = other
    pod = make_pod("p", claims={"x": "a", "y": "b"}, node_name="node-1")
    outcome = await env.prepare(pod, mixed, gpu_only)
    assert outcome.ok and outcome.calls == {"gpu.example.com": 1, "net.example.com": 1}
    assert list(env.plugin.calls) == [("prepare", ("uid-a", "uid-b"))]
    assert other.batches == [("uid-a",)]
    info = env.manager.get("default", "a")
    assert (
        info is not None
        and info.prepared
        and set(info.driver_state) == {"gpu.example.com", "net.example.com"}
    )


async def test_per_container_cdi_ids_follow_requests(tmp_path: Path) -> None:
    claim = make_claim(
        "c",
        "gpu",
        "other",
        uid="u",
        allocation=make_allocation(("gpu/latest-gpu", "gpu-1"), ("other", "gpu-2")),
    )
    env = Env(tmp_path, claim)
    containers = [
        make_container("all", claims=["mine"]),
        make_container("gpu", claims=[("mine", "gpu")]),
        make_container("other", claims=[("mine", "other")]),
        make_container("none"),
    ]
    pod = make_pod("p", claims={"mine": "c"}, containers=containers, node_name="node-1")
    assert (await env.prepare(pod, claim)).ok
    assert env.manager.pod_cdi_devices(pod) == {
        "all": [COMMON, "k8s.gpu.example.com/gpu=u-gpu-1", COMMON, "k8s.gpu.example.com/gpu=u-gpu-2"],
        "gpu": [COMMON, "k8s.gpu.example.com/gpu=u-gpu-1"],  # subrequest result counts for "gpu"
        "other": [COMMON, "k8s.gpu.example.com/gpu=u-gpu-2"],
        "none": [],
    }


async def test_whole_call_failures_are_retried(tmp_path: Path) -> None:
    claim = make_claim("c", allocation=make_allocation(("gpu", "gpu-0")))
    pod = make_pod("p", claims={"gpu": "c"}, node_name="node-1")
    env = Env(tmp_path, claim, failures=FailureSwitches(fail_prepare_calls=2))
    outcome = await env.prepare(pod, claim, attempts=3)
    assert outcome.ok and outcome.calls == {"gpu.example.com": 3}

    env2 = Env(tmp_path / "b", claim, failures=FailureSwitches(fail_prepare_calls=2))
    failed = await env2.prepare(pod, claim, attempts=2)
    assert not failed.ok and failed.errors == [
        "NodePrepareResources: injected failure: NodePrepareResources unavailable"
    ]
    info = env2.manager.get("default", "c")
    assert info is not None and not info.prepared
    assert (await env2.prepare(pod, claim, attempts=1)).ok  # the shell's later retry


class Replaced:
    """An instance that goes while its call is in flight (the plugin restarted): the call is lost
    and the registry serves the new instance from then on."""

    def __init__(self, plugins: dict, successor: object) -> None:
        self.plugins, self.successor, self.calls = plugins, successor, 0

    def node_prepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        self.calls += 1
        self.plugins["gpu.example.com"] = self.successor
        raise PluginError("DRA driver gpu.example.com: the plugin deregistered during the call")


async def test_a_retry_reaches_the_instance_serving_the_driver_now(tmp_path: Path) -> None:
    claim = make_claim("c", allocation=make_allocation(("gpu", "gpu-0")))
    pod = make_pod("p", claims={"gpu": "c"}, node_name="node-1")
    env = Env(tmp_path, claim)
    old = env.plugins["gpu.example.com"] = Replaced(env.plugins, env.plugin)
    outcome = await env.prepare(pod, claim, attempts=2)
    assert outcome.ok and outcome.calls == {"gpu.example.com": 2}
    assert old.calls == 1 and list(env.plugin.calls) == [("prepare", ("uid-c",))]


async def test_per_claim_error_fails_the_pod_and_only_that_claim_is_asked_again(tmp_path: Path) -> None:
    a = make_claim("a", allocation=make_allocation(("gpu", "gpu-0")))
    b = make_claim("b", allocation=make_allocation(("gpu", "gpu-1")))
    switches = FailureSwitches(prepare_claims={"a"})
    env = Env(tmp_path, a, b, failures=switches)
    pod = make_pod("p", claims={"x": "a", "y": "b"}, node_name="node-1")
    outcome = await env.prepare(pod, a, b, attempts=2)
    assert not outcome.ok
    assert outcome.errors == [
        "NodePrepareResources failed for ResourceClaim a: error preparing devices for claim uid-a: "
        "injected failure for claim a"
    ]
    assert list(env.plugin.calls) == [("prepare", ("uid-a", "uid-b")), ("prepare", ("uid-a",))]
    switches.prepare_claims.clear()
    assert (await env.prepare(pod, a, b)).ok
    assert env.plugin.calls[-1] == ("prepare", ("uid-a",))


async def test_unprepare_failures_keep_the_pod_reference_until_it_succeeds(tmp_path: Path) -> None:
    env, claim, (p0, _) = shared_setup(tmp_path)
    await env.prepare(p0, claim)
    env.plugin.failures.unprepare_claims.add("shared")
    assert not (await env.unprepare(p0, "shared", attempts=2)).ok
    assert env.manager.has_pod_reference("uid-p0")
    env.plugin.failures.unprepare_claims.clear()
    assert (await env.unprepare(p0, "shared")).ok and not env.manager.has_pod_reference("uid-p0")


async def test_missing_plugin_and_reused_claim_name_are_errors(tmp_path: Path) -> None:
    claim = make_claim("c", allocation=make_allocation(("gpu", "gpu-0", "none.example.com")))
    env = Env(tmp_path, claim)
    pod = make_pod("p", claims={"gpu": "c"}, node_name="node-1")
    assert (await env.prepare(pod, claim)).errors == ["DRA driver none.example.com is not registered"]

    env2 = Env(tmp_path / "b")
    first = make_claim("c", uid="old", allocation=make_allocation(("gpu", "gpu-0")))
    env2.claims["old"] = first
    assert (await env2.prepare(pod, first)).ok
    second = make_claim("c", uid="new", allocation=make_allocation(("gpu", "gpu-0")))
    outcome = await env2.prepare(make_pod("q", claims={"gpu": "c"}, node_name="node-1"), second)
    assert outcome.errors == [
        "old ResourceClaim with same name c and different UID old still exists (previous pod force-deleted?)"
    ]


async def test_state_survives_a_kubelet_restart_through_the_checkpoint(tmp_path: Path) -> None:
    env, claim, (p0, p1) = shared_setup(tmp_path)
    await env.prepare(p0, claim)
    await env.prepare(p1, claim)
    write_checkpoint(tmp_path / "kubelet", env.manager.entries())
    before = env.manager.pod_cdi_devices(p0)

    # "Kill" the kubelet: a new manager from the file, a new plugin instance from its own state.
    restarted = Env(tmp_path, claim)
    restarted.manager = DRAManager(read_checkpoint(tmp_path / "kubelet"))
    assert restarted.manager.pod_cdi_devices(p0) == before
    shared = restarted.manager.get("default", "shared")
    assert shared is not None and shared.pod_uids == {"uid-p0", "uid-p1"}
    # Re-syncing a running pod re-asks the driver (prepared is not persisted), which is idempotent.
    assert (await restarted.prepare(p0, claim)).ok and list(restarted.plugin.calls) == [("prepare", ("c1",))]
    assert (await restarted.unprepare(p0, "shared")).ok and (await restarted.unprepare(p1, "shared")).ok
    assert restarted.plugin.calls[-1] == ("unprepare", ("c1",))


def test_checkpoint_matches_upstream_bytes_and_detects_corruption(tmp_path: Path) -> None:
    # Upstream's own test vector (pkg/kubelet/cm/dra/checkpoint/checkpointer_test.go).
    info = ClaimInfo(
        claim_uid="067798be-454e-4be4-9047-1aa06aea63f7",
        claim_name="example",
        namespace="default",
        pod_uids={"139cdb46-f989-4f17-9561-ca10cfb509a6"},
        driver_state={
            "test-driver.cdi.k8s.io": [
                DeviceState("worker-1", "dev-1", ("test request",), ("example.com/example=cdi-example",))
            ]
        },
    )
    blob = encode_checkpoint([info])
    assert blob.endswith(b'"Checksum":1597924435}')
    assert blob.startswith(
        b'{"Data":"{\\"kind\\":\\"DRACheckpoint\\",\\"apiVersion\\":\\"checkpoint.dra.kubelet.k8s.io/v1\\"'
    )
    (decoded,) = decode_checkpoint(blob)
    assert decoded == info

    no_devices = ClaimInfo(
        "4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
        "example-2",
        "default",
        {"139cdb46-f989-4f17-9561-ca10cfb509a6"},
        {"test-driver.cdi.k8s.io": [DeviceState("worker-1", "dev-2")]},
    )
    first = ClaimInfo(
        **{
            **{f: getattr(info, f) for f in ("claim_uid", "namespace", "pod_uids", "driver_state")},
            "claim_name": "example-1",
        }
    )
    assert encode_checkpoint([no_devices, first]).endswith(b'"Checksum":3633532417}')

    corrupt = blob.replace(b"dev-1", b"dev-9")
    with pytest.raises(CorruptCheckpointError, match="checkpoint is corrupted"):
        decode_checkpoint(corrupt)
    with pytest.raises(CheckpointError, match="invalid JSON"):
        decode_checkpoint(b"{")

    path = write_checkpoint(tmp_path, [info])
    assert path.name == "dra_manager_state" and read_checkpoint(tmp_path) == [info]
    path.write_bytes(corrupt)
    with pytest.raises(CorruptCheckpointError):
        read_checkpoint(tmp_path)
    assert read_checkpoint(tmp_path / "empty") == []


def test_plan_prepare_refuses_unallocated_claims_without_touching_the_cache() -> None:
    manager = DRAManager()
    pod = make_pod("p", claims={"gpu": "c"}, node_name="node-1")
    ok = make_claim("ok", allocation=make_allocation(("gpu", "gpu-0")))
    unallocated = make_claim("c")
    with pytest.raises(ManagerError, match="ResourceClaim c: not allocated"):
        manager.plan_prepare(pod, [ok, unallocated])
    assert manager.entries() == [] and not manager.dirty
    plan = manager.plan_prepare(pod, [ok])
    assert manager.dirty and [r.uid for r in plan.batches["gpu.example.com"]] == ["uid-ok"]
    msgspec.json.encode(plan.batches["gpu.example.com"])  # refs are plain wire structs
