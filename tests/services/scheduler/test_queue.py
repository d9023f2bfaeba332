"""The scheduling queue: ordering, backoff, and requeueing by the events that can help."""

from __future__ import annotations

import msgspec

from draflow.events.api.core_v1 import PodResourceClaimStatus
from draflow.services.scheduler.framework import Reserved, SchedulingError, Unschedulable
from draflow.services.scheduler.plugins.dynamicresources import prebind_claim
from tests.builders import (
    bound_to,
    make_allocation,
    make_claim,
    make_class,
    make_node,
    make_pod,
    make_slice,
    pod_with_template_claim,
    with_status,
)
from tests.builders.scheduler import cluster, gpu_cluster, next_result


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _core(*objects, clock: Clock | None = None):
    return cluster(*objects, clock=clock or Clock())


def _where(core, pod) -> str:
    info = core.queue.info(f"{pod.metadata.namespace}/{pod.metadata.name}")
    return info.where if info is not None else ""


def test_priority_then_fifo() -> None:
    clock = Clock()
    core = _core(make_node("n1"), clock=clock)
    for name, priority in (("a", 0), ("b", 10), ("c", 0), ("d", 10)):
        core.queue.add(make_pod(name, priority=priority))
        clock.now += 1
    order = []
    while (qpi := core.queue.pop()) is not None:
        order.append(qpi.key)
        core.queue.done(qpi.key)
    assert order == ["default/b", "default/d", "default/a", "default/c"]


def test_backoff_doubles_up_to_ten_seconds() -> None:
    clock = Clock()
    core = _core(clock=clock)  # no nodes: every attempt is a scheduling error
    core.observe(make_pod("p"))
    waits = []
    for _ in range(6):
        step = core.schedule_next()
        assert step is not None and isinstance(step[1], SchedulingError)
        wake = core.queue.next_wakeup()
        assert wake is not None
        waits.append(wake - clock.now)
        clock.now = wake - 0.001
        assert core.queue.pop() is None  # still backing off
        clock.now = wake
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_unschedulable_pod_waits_for_a_helpful_event() -> None:
    clock = Clock()
    core = _core(make_class(), make_node("n1"), clock=clock)  # no devices yet
    pod, claim = pod_with_template_claim("p")
    core.observe(claim)
    core.observe(pod)
    result = next_result(core)
    assert isinstance(result, Unschedulable) and result.unschedulable_plugins == {"DynamicResources"}
    assert _where(core, pod) == "unschedulable"
    # Events the DRA plugin did not register for leave the pod alone.
    core.observe(bound_to(make_pod("other"), "n1"))
    core.observe_deleted("Pod", "default", "other")
    assert _where(core, pod) == "unschedulable"
    clock.now += 30
    core.observe(make_slice("n1", 1))  # a ResourceSlice appeared
    assert _where(core, pod) == "active"
    result = next_result(core)
    assert isinstance(result, Reserved)


def test_recent_failure_goes_to_backoff_and_only_an_idle_queue_takes_it_early() -> None:
    """Upstream's SchedulerPopFromBackoffQ: active pods first; with none, the pod an event moved
    to backoff is tried before its backoff ends. A pod backing off after an error is not."""
    clock = Clock()
    core = _core(make_class(), make_node("n1"), clock=clock)
    pod, claim = pod_with_template_claim("p")
    core.observe(claim)
    core.observe(pod)
    core.schedule_next()
    core.observe(make_slice("n1", 1))
    assert _where(core, pod) == "backoff"
    core.observe(make_pod("q"))
    first = core.queue.pop()
    assert first is not None and first.key == "default/q"  # the active pod goes first
    early = core.queue.pop()
    assert early is not None and early.key == "default/p" and early.attempts == 2
    core.queue.add_backoff(early)  # an error: its backoff is waited out
    core.queue.add_backoff(first)
    assert core.queue.pop() is None
    clock.now += 2.0
    assert core.queue.pop() is not None


def test_claim_hints() -> None:
    clock = Clock()
    core = _core(make_class(), make_node("n1"), make_slice("n1", 1), clock=clock)
    holder = with_status(make_claim("holder"), make_allocation("dev-0", node="n1", pool="n1"))
    core.observe(holder)
    pod, claim = pod_with_template_claim("p")
    core.observe(claim)
    core.observe(pod)
    core.schedule_next()
    assert _where(core, pod) == "unschedulable"
    clock.now += 60
    unrelated = msgspec.structs.replace(
        holder, metadata=msgspec.structs.replace(holder.metadata, labels={"touched": "yes"})
    )
    core.observe(unrelated)  # status unchanged, not the pod's claim
    assert _where(core, pod) == "unschedulable"
    core.observe(with_status(holder, None))  # some claim was deallocated: devices came free
    assert _where(core, pod) == "active"


def test_pod_waiting_for_its_claim_is_gated_until_created() -> None:
    core = _core(make_class(), make_node("n1"), make_slice("n1", 1))
    pod, claim = pod_with_template_claim("p")
    core.observe(pod)  # the claim controller has not created the claim yet
    assert _where(core, pod) == "unschedulable"
    assert core.queue.info("default/p").gated_reason == 'could not find ResourceClaim "default/p-gpu"'
    assert core.schedule_next() is None
    core.observe(claim)
    assert _where(core, pod) == "active"


def test_pod_update_with_generated_claim_name_moves_it() -> None:
    core = _core(make_class(), make_node("n1"), make_slice("n1", 1))
    pod, claim = pod_with_template_claim("p")
    core.observe(claim)
    waiting = msgspec.structs.replace(
        pod, status=msgspec.structs.replace(pod.status, resource_claim_statuses=())
    )
    core.observe(waiting)
    assert core.queue.info("default/p").gated_reason == 'pod "default/p": ResourceClaim not created yet'
    status = PodResourceClaimStatus(name="gpu", resource_claim_name="p-gpu")
    core.observe(
        msgspec.structs.replace(
            pod, status=msgspec.structs.replace(pod.status, resource_claim_statuses=(status,))
        )
    )
    assert _where(core, pod) == "active"


def test_in_flight_events_are_not_lost() -> None:
    clock = Clock()
    core = _core(make_class(), make_node("n1"), clock=clock)
    pod, claim = pod_with_template_claim("p")
    core.observe(claim)
    core.observe(pod)
    qpi = core.queue.pop()
    result = core.schedule(qpi.pod)
    assert isinstance(result, Unschedulable)
    core.observe(make_slice("n1", 1))  # arrives while the cycle's outcome is not reported yet
    core.queue.add_unschedulable(qpi, result.unschedulable_plugins)
    assert _where(core, pod) == "backoff"


def test_node_resources_hints() -> None:
    clock = Clock()
    core = _core(make_node("n1", cpu="2"), bound_to(make_pod("big", cpu="2"), "n1"), clock=clock)
    pod = make_pod("p", cpu="1")
    core.observe(pod)
    result = next_result(core)
    assert isinstance(result, Unschedulable) and result.unschedulable_plugins == {"NodeResourcesFit"}
    clock.now += 60
    core.observe(make_node("tiny", cpu="500m"))  # cannot fit the pod even empty
    assert _where(core, pod) == "unschedulable"
    core.observe_deleted("Pod", "default", "big")  # room on n1
    assert _where(core, pod) == "active"


def test_node_affinity_and_taint_hints() -> None:
    clock = Clock()
    core = _core(make_node("n1", labels={"zone": "a"}), clock=clock)
    pod = make_pod("p", node_selector={"zone": "b"})
    core.observe(pod)
    core.schedule_next()
    clock.now += 60
    core.observe(make_node("n2", labels={"zone": "c"}))
    assert _where(core, pod) == "unschedulable"
    core.observe(make_node("n1", labels={"zone": "b"}))  # label update makes n1 match
    assert _where(core, pod) == "active"


def test_unschedulable_pods_are_retried_after_five_minutes() -> None:
    clock = Clock()
    core = _core(make_node("n1", cpu="1"), clock=clock)
    pod = make_pod("p", cpu="2")
    core.observe(pod)
    core.schedule_next()
    clock.now += 299
    core.queue.flush()
    assert _where(core, pod) == "unschedulable"
    clock.now += 2
    core.queue.flush()
    assert _where(core, pod) == "active"


def test_scheduling_gates() -> None:
    core = _core(make_node("n1"))
    pod = make_pod("p", scheduling_gates=["example.com/wait"])
    core.observe(pod)
    assert core.queue.info("default/p").gated_reason == "waiting for scheduling gates: [example.com/wait]"
    core.observe(make_pod("p"))
    assert _where(core, pod) == "active"


def test_reserved_pod_leaves_the_queue_and_compensation_puts_it_back() -> None:
    clock = Clock()
    core = gpu_cluster(1, 1)
    core.queue.clock = clock
    pod, claim = pod_with_template_claim("p")
    core.observe(claim)
    core.observe(pod)
    result = next_result(core)
    assert isinstance(result, Reserved) and "default/p" not in core.queue
    core.unreserve(pod)
    assert _where(core, pod) == "backoff"
    assert core.queue.next_wakeup() == clock.now + 1.0
    clock.now += 1
    second = next_result(core)
    assert isinstance(second, Reserved)
    core.unreserve(pod)  # a second failed binding: the attempt count carries on
    assert core.queue.next_wakeup() == clock.now + 2.0
    clock.now += 2
    again = next_result(core)
    assert isinstance(again, Reserved)
    core.observe(prebind_claim(claim, again.claims[0]))
    core.observe(bound_to(pod, again.node_name))
    assert "default/p" not in core.queue


def test_pods_of_other_schedulers_and_deleted_pods_are_not_queued() -> None:
    core = _core(make_node("n1"))
    other = make_pod("o")
    other = msgspec.structs.replace(
        other, spec=msgspec.structs.replace(other.spec, scheduler_name="my-scheduler")
    )
    core.observe(other)
    assert "default/o" not in core.queue
    pod = make_pod("p")
    core.observe(pod)
    assert "default/p" in core.queue
    core.observe_deleted("Pod", "default", "p")
    assert "default/p" not in core.queue and core.schedule_next() is None
    assert core.queue.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "in-flight": 0}


def test_updates_of_an_assumed_pod_do_not_requeue_it() -> None:
    core = gpu_cluster(1, 1)
    pod, claim = pod_with_template_claim("p")
    core.observe(claim)
    core.observe(pod)
    assert isinstance(next_result(core), Reserved)
    touched = msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, labels={"x": "y"}))
    core.observe(touched)  # e.g. a label change while the saga runs
    assert "default/p" not in core.queue


def test_finished_pods_are_not_scheduled() -> None:
    core = _core(make_node("n1"))
    core.observe(make_pod("p", phase="Failed"))
    assert "default/p" not in core.queue


def test_claim_events_only_reach_pods_naming_the_claim() -> None:
    core = _core(make_class(), make_node("n1"), make_slice("n1", 1))
    pod, claim = pod_with_template_claim("p")
    waiting = msgspec.structs.replace(
        pod, status=msgspec.structs.replace(pod.status, resource_claim_statuses=())
    )
    core.observe(waiting)  # not even the claim name yet
    other_pod, other_claim = pod_with_template_claim("q")
    calls = []
    plugin = core.profile.plugin("DynamicResources")
    original = core.queue._hints["DynamicResources"]

    def counting(pod, event, cluster):
        calls.append(pod.metadata.name)
        return hint(pod, event, cluster)

    resource, _, hint = next(r for r in original if r[0].value == "ResourceClaim")
    core.queue._hints["DynamicResources"] = [(r, a, counting if r == resource else h) for r, a, h in original]
    core.observe(other_claim)  # a claim the waiting pod does not name: no hint runs
    assert calls == [] and _where(core, pod) == "unschedulable"
    core.observe(pod)  # the claim controller recorded the generated name: re-indexed, still gated
    assert core.queue.info("default/p").gated_reason == 'could not find ResourceClaim "default/p-gpu"'
    core.observe(claim)
    assert calls == ["p"] and _where(core, pod) == "active"
    assert plugin.queue_keys(pod) == ["default/p-gpu"]
    assert other_pod.metadata.name == "q"


def test_a_queued_pod_assumed_by_a_resumed_saga_is_not_scheduled_again() -> None:
    core = gpu_cluster(1, 2)
    pod, claim = pod_with_template_claim("p")
    core.observe(claim)
    core.observe(pod)  # queued, as after a restart
    core.cluster.assume_pod(pod, "node-000")  # the resumed saga re-assumes its decision
    assert core.schedule_next() is None
    assert "default/p" not in core.queue


class _CountingPreEnqueue:
    """A PreEnqueue plugin that lets every pod through and counts how often it was asked: the
    queue's work per pop, independent of the clock or machine."""

    name = "CountPreEnqueue"

    def __init__(self) -> None:
        self.calls = 0

    def pre_enqueue(self, pod: object, cluster: object) -> None:
        self.calls += 1


def test_pop_does_not_look_at_the_whole_pool() -> None:
    """A burst of pods created before their claims waits gated in the pool; each pop must cost the
    same whether 10 or 2,000 pods wait there, also once they have waited over five minutes: the
    leftover flush retries each such pod once, then again only every 30 s (upstream's flush
    period), not on every pop."""
    from draflow.services.scheduler.framework import Scheduler, SchedulerConfig
    from draflow.services.scheduler.plugins import default_plugins

    for waiting in (10, 2000):
        clock = Clock()
        counter = _CountingPreEnqueue()
        core = Scheduler(SchedulerConfig(), plugins=[counter, *default_plugins()], clock=clock)
        for obj in (make_class(), make_node("n1"), make_slice("n1", 8)):
            core.observe(obj)
        for i in range(waiting):
            core.observe(pod_with_template_claim(f"gated-{i:04d}")[0])  # no claim yet: gated
        assert counter.calls == waiting
        clock.now += 301  # every gated pod is due for the leftover flush
        core.queue.flush()
        assert counter.calls == 2 * waiting  # each looked at once
        for i in range(8):
            pod, claim = pod_with_template_claim(f"ready-{i}")
            core.observe(claim)
            core.observe(pod)
        before = counter.calls
        for _ in range(8):
            clock.now += 1
            assert isinstance(next_result(core), Reserved)
        assert counter.calls == before  # eight pops, none re-ran PreEnqueue on the pool
        clock.now += 30  # the flush period: the gated pods are looked at once more
        core.queue.flush()
        assert counter.calls == before + waiting


def test_counts_match_where_every_pod_is() -> None:
    """The pending-pods metric, counted without walking the pool, against every pod's place."""

    def brute(core) -> dict[str, int]:
        out = {"active": 0, "backoff": 0, "unschedulable": 0, "in-flight": 0}
        for key in list(core.queue._pods):
            out[core.queue.info(key).where] += 1
        return out

    clock = Clock()
    core = _core(make_class(), make_node("n1", cpu="2"), make_slice("n1", 2), clock=clock)
    for i in range(3):
        core.observe(pod_with_template_claim(f"gated-{i}")[0])  # no claim: gated
    for i in range(4):
        pod, claim = pod_with_template_claim(f"p{i}")
        core.observe(claim)
        core.observe(pod)
    core.observe(make_pod("huge", cpu="64"))
    assert core.queue.counts() == brute(core)
    qpi = core.queue.pop()  # in flight
    assert qpi is not None and core.queue.counts() == brute(core) and brute(core)["in-flight"] == 1
    core.queue.add_backoff(qpi)
    assert core.queue.counts() == brute(core) and brute(core)["backoff"] == 1
    while core.schedule_next() is not None:
        assert core.queue.counts() == brute(core)
    core.observe_deleted("Pod", "default", "gated-0")
    clock.now += 20
    core.queue.flush()
    assert core.queue.counts() == brute(core)


def test_pool_deadlines_stay_bounded_when_pods_are_reindexed() -> None:
    """Each re-index of a waiting pod (a pod update that moves nothing) adds a deadline entry; the
    stale ones are compacted away, and the pod is still retried after five minutes."""
    clock = Clock()
    core = _core(make_node("n1", cpu="1"), clock=clock)
    pod = make_pod("p", cpu="2")
    core.observe(pod)
    core.schedule_next()
    queue = core.queue
    qpi = queue.info("default/p")
    assert qpi is not None and qpi.where == "unschedulable"
    for _ in range(5000):
        queue._pool_add(qpi)  # what update() does for a pod whose change helps nothing
    assert len(queue._pool_deadlines) <= 2 * len(queue._unschedulable) + 1025
    clock.now += 299
    queue.flush()
    assert _where(core, pod) == "unschedulable"
    clock.now += 2
    queue.flush()
    assert _where(core, pod) == "active"


def test_a_drained_pool_keeps_no_deadlines() -> None:
    """Pods that wait in the pool and then go leave no deadline entries behind (each would
    otherwise stay until its five minutes are up)."""
    clock = Clock()
    core = _core(make_node("n1", cpu="1"), clock=clock)
    for i in range(3):
        core.observe(make_pod(f"p{i}", cpu="2"))
    while core.schedule_next() is not None:
        pass
    queue = core.queue
    assert len(queue._unschedulable) == 3 and len(queue._pool_deadlines) >= 3
    for i in range(3):
        core.observe_deleted("Pod", "default", f"p{i}")
    assert not queue._unschedulable and queue._pool_deadlines == []
