"""The assume cache: decisions not yet visible in the log count as taken, never double-booked."""

from __future__ import annotations

import random

import msgspec
import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.services.scheduler.framework import Reserved, Unschedulable
from draflow.services.scheduler.plugins.dynamicresources import prebind_claim
from tests.builders import bound_to, make_pod, pod_with_template_claim
from tests.builders.scheduler import gpu_cluster, next_result

pytestmark = pytest.mark.kep4381


def _devices(result: Reserved) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for binding in result.claims:
        assert binding.allocation is not None
        out.extend((r.pool, r.device) for r in binding.allocation.devices.results)
    return out


def _used_devices(core) -> dict:
    return dict(core.cluster.ledger.exclusive)


def test_interleaved_cycles_never_double_book() -> None:
    """Decisions, written claims, bindings and compensations in random interleavings: every
    device is held by at most one claim at every step, and the ledger matches the decisions."""
    rng = random.Random(7)
    core = gpu_cluster(4, 3)
    pending: list[tuple[Reserved, Pod, ResourceClaim]] = []
    held: dict[tuple[str, str], str] = {}
    claims = {}
    for i in range(60):
        pod, claim = pod_with_template_claim(f"p{i}")
        claims[pod.metadata.name] = (pod, claim)
        core.observe(claim)
        core.observe(pod)
    for _ in range(400):
        action = rng.random()
        if action < 0.5:
            step = core.schedule_next()
            if step is None:
                continue
            _, result = step
            if isinstance(result, Reserved):
                for device in _devices(result):
                    assert device not in held, f"{device} double-booked"
                    held[device] = result.pod.name
                pod, claim = claims[result.pod.name]
                pending.append((result, pod, claim))
        elif pending and action < 0.8:
            result, pod, claim = pending.pop(rng.randrange(len(pending)))
            core.observe(prebind_claim(claim, result.claims[0]))
            core.observe(bound_to(pod, result.node_name))
        elif pending:
            result, pod, claim = pending.pop(rng.randrange(len(pending)))
            core.unreserve(pod)  # saga compensation before anything was written
            for device in _devices(result):
                del held[device]
        assert set(_used_devices(core)) == {("gpu.example.com", pool, dev) for pool, dev in held}
        assert all(count == 1 for count in _used_devices(core).values())


def test_forget_frees_devices_and_node_resources() -> None:
    core = gpu_cluster(1, 1, cpu="1")
    a, a_claim = pod_with_template_claim("a", cpu="1")
    b, b_claim = pod_with_template_claim("b", cpu="1")
    core.observe(a_claim)
    core.observe(b_claim)
    assert isinstance(core.schedule(a), Reserved)
    blocked = core.schedule(b)
    assert isinstance(blocked, Unschedulable)
    assert blocked.message == "0/1 nodes are available: 1 Insufficient cpu."
    core.unreserve(a)
    assert isinstance(core.schedule(b), Reserved)


def test_written_claim_replaces_the_pending_allocation() -> None:
    core = gpu_cluster(1, 2)
    pod, claim = pod_with_template_claim("a")
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved)
    assert core.cluster.assumed.claims
    core.observe(prebind_claim(claim, result.claims[0]))
    assert not core.cluster.assumed.claims  # the log caught up
    assert len(_used_devices(core)) == 1
    core.unreserve(pod)  # binding failed after PreBind: the written allocation stays counted
    assert len(_used_devices(core)) == 1


def test_bound_pod_replaces_the_assumed_pod() -> None:
    core = gpu_cluster(1, 0, cpu="2")
    pod = make_pod("p", cpu="1")
    result = core.schedule(pod)
    assert isinstance(result, Reserved)
    node = core.cluster.nodes[result.node_name]
    assert node.requested["cpu"] == 1000 and node.pods["default/p"].assumed
    core.observe(bound_to(pod, result.node_name))
    assert node.requested["cpu"] == 1000 and not node.pods["default/p"].assumed
    assert not core.cluster.assumed.pods


def _rv(claim, version: str):
    return msgspec.structs.replace(
        claim, metadata=msgspec.structs.replace(claim.metadata, resource_version=version)
    )


def test_stale_claim_update_is_ignored() -> None:
    core = gpu_cluster(1, 2)
    pod, claim = pod_with_template_claim("a")
    claim = msgspec.structs.replace(
        claim, metadata=msgspec.structs.replace(claim.metadata, resource_version="5")
    )
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved)
    written = prebind_claim(claim, result.claims[0])
    written = msgspec.structs.replace(
        written, metadata=msgspec.structs.replace(written.metadata, resource_version="7")
    )
    core.observe(written)
    core.observe(claim)  # an older version replayed late
    assert core.cluster.claim("default", "a-gpu") is written
    assert len(_used_devices(core)) == 1


def test_claim_deleted_while_pending() -> None:
    core = gpu_cluster(1, 1)
    pod, claim = pod_with_template_claim("a")
    core.observe(claim)
    assert isinstance(core.schedule(pod), Reserved)
    core.observe_deleted("ResourceClaim", "default", "a-gpu")
    assert not _used_devices(core)
    other, other_claim = pod_with_template_claim("b")
    core.observe(other_claim)
    assert isinstance(core.schedule(other), Reserved)


def test_pod_deleted_while_assumed() -> None:
    core = gpu_cluster(1, 1)
    pod, claim = pod_with_template_claim("a")
    core.observe(claim)
    core.observe(pod)
    result = next_result(core)
    assert isinstance(result, Reserved)
    core.observe_deleted("Pod", "default", "a")
    assert not core.cluster.assumed.pods and not _used_devices(core)
