"""Reserve outcomes: a plugin that waits (``Code.PENDING``) ends the cycle Unschedulable, the pod
waits in the pool until its plugin's hint requeues it (through the backoff); other Reserve
failures stay scheduling errors with backoff (as before)."""

from __future__ import annotations

from draflow.events.api.core_v1 import Pod
from draflow.services.scheduler.framework import (
    ActionType,
    ClusterEvent,
    CycleState,
    EventRegistration,
    EventResource,
    QueueingHint,
    Reserved,
    Scheduler,
    SchedulerConfig,
    SchedulingError,
    Status,
    Unschedulable,
)
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.status import Code, error, pending, unschedulable
from draflow.services.scheduler.plugins import default_plugins
from tests.builders import make_node, make_pod

WAIT = "waiting for the gate to open"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A Reserve plugin that always succeeds and records Unreserve (runs before the waiter)."""

    name = "Recorder"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def events_to_register(self) -> list[EventRegistration]:
        return []

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        self.calls.append(f"reserve {node_name}")
        return None

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        self.calls.append(f"unreserve {node_name}")


def _gate_hint(pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
    node = event.new
    labels = node.metadata.labels if node is not None else {}
    return QueueingHint.QUEUE if labels.get("gate") == "open" else QueueingHint.SKIP


class Gate:
    """Reserve waits until the chosen node is labelled ``gate=open``; ``outcome`` replaces the
    wait by another status (to check the other codes)."""

    name = "Gate"

    def __init__(self, outcome: Status | None = None) -> None:
        self.outcome = outcome
        self.unreserved = 0

    def events_to_register(self) -> list[EventRegistration]:
        actions = ActionType.ADD | ActionType.UPDATE_NODE_LABEL
        return [EventRegistration(EventResource.NODE, actions, _gate_hint)]

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        node = state.cluster.nodes[node_name].node
        if node.metadata.labels.get("gate") == "open":
            return None
        return self.outcome if self.outcome is not None else pending(WAIT)

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        self.unreserved += 1


def _core(gate: Gate, clock: Clock) -> tuple[Scheduler, Recorder]:
    recorder = Recorder()
    core = Scheduler(SchedulerConfig(), plugins=[*default_plugins(), recorder, gate], clock=clock)
    core.observe(make_node("n1"))
    return core, recorder


def _where(core: Scheduler, pod: Pod) -> str:
    info = core.queue.info(f"{pod.metadata.namespace}/{pod.metadata.name}")
    return info.where if info is not None else ""


def test_pending_status_is_a_rejection() -> None:
    status = pending(WAIT, plugin="Gate")
    assert status.code == Code.PENDING and status.rejected and status.message == WAIT


def test_a_waiting_reserve_is_unschedulable_and_requeued_without_backoff() -> None:
    clock = Clock()
    gate = Gate()
    core, recorder = _core(gate, clock)
    pod = make_pod("p")
    core.observe(pod)

    step = core.schedule_next()
    assert step is not None
    result = step[1]
    assert isinstance(result, Unschedulable)
    assert result.message == f"0/1 nodes are available: 1 {WAIT}."
    assert result.num_nodes == 1
    assert result.node_reasons == ((WAIT, 1),)
    assert result.unschedulable_plugins == {"Gate"}
    assert result.plugin_reasons == {"Gate": (WAIT,)}
    assert result.deallocate is None
    # Reserve was undone: the plugins before the waiter and the waiter itself, and the pod is
    # not assumed.
    assert recorder.calls == ["reserve n1", "unreserve n1"] and gate.unreserved == 1
    assert "default/p" not in core.cluster.assumed.pods

    # In the pool, not backing off (an error would retry after the backoff whatever happens);
    # time alone does not bring it back before the 5-minute flush, nor do events the hint skips.
    assert _where(core, pod) == "unschedulable"
    assert core.queue.next_wakeup() is None
    clock.now += 30
    assert core.schedule_next() is None
    core.observe(make_node("n1", labels={"other": "x"}))
    assert _where(core, pod) == "unschedulable"

    # The change it waited for requeues it; the next attempt reserves.
    core.observe(make_node("n1", labels={"gate": "open"}))
    assert _where(core, pod) == "active"
    step = core.schedule_next()
    assert step is not None and isinstance(step[1], Reserved) and step[1].node_name == "n1"


def test_a_wait_answered_at_once_goes_to_backoff_and_an_idle_scheduler_tries_it_early() -> None:
    """The change arrives right after the wait (the plugin's own write landing): the pod goes to
    backoff, as any unschedulable pod does; with nothing else to do the scheduler takes it before
    the backoff ends (upstream's SchedulerPopFromBackoffQ)."""
    clock = Clock()
    core, _ = _core(Gate(), clock)
    pod = make_pod("p")
    core.observe(pod)
    step = core.schedule_next()
    assert step is not None and isinstance(step[1], Unschedulable)
    core.observe(make_node("n1", labels={"gate": "open"}))
    assert _where(core, pod) == "backoff"
    step = core.schedule_next()
    assert step is not None and isinstance(step[1], Reserved)


def test_other_reserve_failures_stay_scheduling_errors_with_backoff() -> None:
    for outcome in (error("boom"), unschedulable("full")):
        clock = Clock()
        gate = Gate(outcome)
        core, recorder = _core(gate, clock)
        pod = make_pod("p")
        core.observe(pod)
        step = core.schedule_next()
        assert step is not None
        result = step[1]
        assert isinstance(result, SchedulingError)
        assert result.message == outcome.message and result.plugin == "Gate"
        assert recorder.calls == ["reserve n1", "unreserve n1"]
        assert _where(core, pod) == "backoff"
        assert core.queue.next_wakeup() == clock.now + 1.0
