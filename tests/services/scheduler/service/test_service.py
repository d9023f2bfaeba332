"""The scheduler service end to end against a real JetStream: sagas, messages, races."""

from __future__ import annotations

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.dra import DELETE_PROTECTION_FINALIZER, ClaimAllocated, ClaimDeallocated
from draflow.events.objects import KubeEvent, decode_stored
from tests.builders import exact, make_allocation, make_claim, make_pod
from tests.helpers import assert_eventually
from tests.services.scheduler.service.conftest import Cluster

pytestmark = pytest.mark.kep4381


async def test_pod_with_template_claim_is_allocated_reserved_and_bound(cluster: Cluster) -> None:
    await cluster.nodes(2, devices=2)
    pod, claim_name = await cluster.pod("pod-0")
    svc = await cluster.start()

    async def bound() -> Pod:
        p = await cluster.get_pod("pod-0")
        assert p.spec.node_name, p.status.conditions
        return p

    p = await assert_eventually(bound, timeout_s=15)
    claim = await cluster.claim(claim_name)
    alloc = claim.status.allocation
    assert alloc is not None and len(alloc.devices.results) == 1
    assert alloc.devices.results[0].pool == p.spec.node_name
    assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid]
    assert DELETE_PROTECTION_FINALIZER in claim.metadata.finalizers
    cond = {c.type: c for c in p.status.conditions}["PodScheduled"]
    assert cond.status == "True"
    await assert_eventually(lambda: svc.outcomes["completed"] == 1)


async def test_unschedulable_pod_gets_condition_and_warning_event(cluster: Cluster) -> None:
    await cluster.nodes(1, devices=1)
    await cluster.pod("pod-a")
    await cluster.pod("pod-b")
    await cluster.start()

    async def one_unschedulable() -> Pod:
        pods = [await cluster.get_pod(n) for n in ("pod-a", "pod-b")]
        assert sorted(bool(p.spec.node_name) for p in pods) == [False, True]
        (waiting,) = [p for p in pods if not p.spec.node_name]
        cond = {c.type: c for c in waiting.status.conditions}["PodScheduled"]
        assert (cond.status, cond.reason) == ("False", "Unschedulable")
        return waiting

    waiting = await assert_eventually(one_unschedulable, timeout_s=15)
    cond = {c.type: c for c in waiting.status.conditions}["PodScheduled"]
    assert cond.message.startswith("0/1 nodes are available: 1 cannot allocate all claims."), cond.message

    async def warning() -> KubeEvent:
        items, _ = await cluster.api.list("Event", namespace="default")
        found = [
            e
            for e in map(decode_stored, items)
            if isinstance(e, KubeEvent)
            and e.reason == "FailedScheduling"
            and e.involved_object.name == waiting.metadata.name
        ]
        assert found
        return found[0]

    ev = await assert_eventually(warning, timeout_s=10)
    assert ev.type == "Warning" and ev.message == cond.message and ev.source.component == "default-scheduler"


async def test_claim_allocated_where_the_pod_cannot_run_is_reallocated(cluster: Cluster) -> None:
    await cluster.nodes(2, devices=1)
    await cluster.apply(make_claim("shared", exact()))
    claim = await cluster.claim("shared")
    subject = cluster.store.subject("ResourceClaim", "default", "shared")
    # allocated on node-0 (nobody reserves it), but the pod may only run on node-1
    wrong = make_allocation("dev-0", node="node-0")
    await cluster.store.append(
        subject, ClaimAllocated(allocation=wrong, node_name="node-0"), expected_last_seq=None
    )
    await cluster.apply(
        make_pod("pinned", claims={"gpu": "shared"}, node_selector={"kubernetes.io/hostname": "node-1"})
    )
    await cluster.start()

    async def bound() -> Pod:
        p = await cluster.get_pod("pinned")
        assert p.spec.node_name == "node-1"
        return p

    await assert_eventually(bound, timeout_s=20)
    claim = await cluster.claim("shared")
    assert claim.status.allocation is not None
    assert claim.status.allocation.devices.results[0].pool == "node-1"
    history = await cluster.store.events(subject)
    types = [type(e.data).__name__ for e in history]
    dealloc = [e for e in history if isinstance(e.data, ClaimDeallocated)]
    assert len(dealloc) == 1, types
    assert isinstance(dealloc[0].data, ClaimDeallocated) and dealloc[0].data.reason == "Reallocate"
    assert dealloc[0].correlation_id.startswith("scheduler-realloc-")
    sagas = await cluster.store.events(f"{cluster.store.root}.ev.Saga._.{dealloc[0].correlation_id}")
    assert type(sagas[-1].data).__name__ == "SagaCompleted"


async def test_each_instance_names_itself_in_its_events_and_the_log(cluster: Cluster) -> None:
    """Two instances both find a pod unschedulable: two Warning Events, one per instance, each with
    kube-scheduler's reporting controller and the instance in ``reportingInstance`` (not one Event
    counted twice); the log's actor of what they append is the instance id."""
    await cluster.nodes(1, devices=1)
    await cluster.pod("nowhere", node_selector={"zone": "none"})
    await cluster.start("scheduler-a")
    await cluster.start("scheduler-b")

    async def both() -> list[KubeEvent]:
        items, _ = await cluster.api.list("Event", namespace="default")
        found = [
            e
            for e in map(decode_stored, items)
            if isinstance(e, KubeEvent)
            and e.reason == "FailedScheduling"
            and e.involved_object.name == "nowhere"
        ]
        assert sorted(e.reporting_instance for e in found) == [
            "default-scheduler-scheduler-a",
            "default-scheduler-scheduler-b",
        ], [(e.reporting_instance, e.count) for e in found]
        return found

    for ev in await assert_eventually(both, timeout_s=15):
        assert (ev.source.component, ev.reporting_component) == ("default-scheduler", "default-scheduler")
    history = await cluster.store.events(cluster.store.subject("Pod", "default", "nowhere"))
    actors = {e.actor for e in history if e.type == "PodUnschedulable"}
    assert actors and actors <= {"scheduler-a", "scheduler-b"}, actors
