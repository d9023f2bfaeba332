"""The scheduling queue: active (priority, then FIFO), backoff, and the unschedulable pool.

As kube-scheduler's PriorityQueue with queueing hints:

* ``add`` runs PreEnqueue; a rejected pod waits in the unschedulable pool ("gated") until an
  event one of the rejecting plugins registered for (and whose hint says Queue) arrives.
* ``pop`` takes the highest-priority, longest-waiting active pod; it is "in flight" until the
  cycle's outcome is reported, and events arriving meanwhile are remembered for it.
* ``add_unschedulable`` after an Unschedulable decision: if an in-flight event already makes a
  retry worthwhile the pod goes to backoff, else it waits in the pool for such an event
  (or ``max_unschedulable_seconds``, upstream's 5-minute flush).
* ``add_backoff`` after an error: backoff regardless.
* Backoff is 1 s doubling per attempt up to 10 s, counted from the failure (injectable clock).
* When nothing is active, ``pop`` takes the pod whose backoff ends first among those an event
  moved out of the pool (upstream's SchedulerPopFromBackoffQ, on by default since 1.33): an idle
  scheduler does not wait out a backoff. Pods backing off after an error wait it out.
* Pods that wait in the pool longer than ``max_unschedulable_seconds`` are retried (upstream's
  leftover flush); their deadlines are a heap, so ``pop`` looks only at the pods that are due, not
  at the whole pool (thousands of pods gated on their claims while a burst is created). A pod the
  flush moved that PreEnqueue gates again is due again ``unschedulable_flush_interval_seconds``
  later (upstream's flush runs every 30 s).

The clock only decides *when* a pod is tried again, never what the cycle decides.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from draflow.events.api.core_v1 import Pod
from draflow.services.scheduler.framework.assume import pod_key
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.config import SchedulerConfig
from draflow.services.scheduler.framework.events import ClusterEvent, EventResource, pod_update_action
from draflow.services.scheduler.framework.interface import EventRegistration, HintFn
from draflow.services.scheduler.framework.profile import Profile
from draflow.services.scheduler.framework.status import QueueingHint

__all__ = ["QueuedPodInfo", "SchedulingQueue"]

ACTIVE = "active"
BACKOFF = "backoff"
UNSCHEDULABLE = "unschedulable"
IN_FLIGHT = "in-flight"


class QueuedPodInfo:
    """A pod in the queue plus its scheduling history."""

    __slots__ = (
        "attempts",
        "flushed_at",
        "gated_reason",
        "index_keys",
        "key",
        "pod",
        "pool_seq",
        "seq",
        "timestamp",
        "unschedulable_plugins",
        "where",
    )

    def __init__(self, pod: Pod, now: float) -> None:
        self.pod = pod
        self.key = pod_key(pod)
        self.attempts = 0
        self.timestamp = now  # when it last entered a queue (FIFO order, backoff start)
        self.unschedulable_plugins: frozenset[str] = frozenset()
        self.gated_reason = ""
        self.index_keys: list[tuple[str, str]] = []  # (plugin, key) entries in the pool index
        self.where = ""
        self.seq = 0
        self.pool_seq = 0  # the pool deadline entry that is current
        self.flushed_at: float | None = None  # when the leftover flush last moved it

    @property
    def priority(self) -> int:
        return self.pod.spec.priority or 0

    def __repr__(self) -> str:
        return f"QueuedPodInfo({self.key}, {self.where}, attempts={self.attempts})"


class SchedulingQueue:
    """See the module docstring. ``clock`` returns seconds (monotonic in the service)."""

    def __init__(
        self,
        profile: Profile,
        cluster: ClusterState,
        config: SchedulerConfig | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.profile = profile
        self.cluster = cluster
        self.config = config if config is not None else SchedulerConfig()
        if clock is None:
            import time

            clock = time.monotonic
        self.clock = clock
        self._pods: dict[str, QueuedPodInfo] = {}
        self._active: list[tuple[int, float, int, QueuedPodInfo]] = []
        self._backoff: list[tuple[float, int, QueuedPodInfo]] = []
        # the subset of _backoff an idle pop may take early (pods with unschedulable plugins;
        # upstream's podBackoffQ, apart from its podErrorBackoffQ)
        self._backoff_early: list[tuple[float, int, QueuedPodInfo]] = []
        self._unschedulable: dict[str, QueuedPodInfo] = {}
        self._in_flight: dict[str, list[ClusterEvent]] = {}
        self._reserved: dict[str, int] = {}  # pods handed to their saga -> attempts so far
        self._seq = 0
        # Registrations by resource: other events cannot move a pod (the pool only holds pods
        # some plugin rejected; see add_unschedulable).
        self._by_resource: dict[EventResource, list[tuple[str, EventRegistration]]] = {}
        # plugin -> [(resource, actions as int, hint)] (IntFlag arithmetic is slow on hot paths)
        self._hints: dict[str, list[tuple[EventResource, int, HintFn | None]]] = {}
        for name, registrations in profile.registrations.items():
            for reg in registrations:
                self._by_resource.setdefault(reg.resource, []).append((name, reg))
                self._hints.setdefault(name, []).append((reg.resource, int(reg.actions), reg.hint))
        self._queue_keys: dict[str, Callable[[Pod], Iterable[str]]] = {}
        for plugin in profile.plugins:
            keys = getattr(plugin, "queue_keys", None)
            if keys is not None:
                self._queue_keys[getattr(plugin, "name")] = keys  # noqa: B009
        self._pool_index: dict[tuple[str, str], set[str]] = {}  # (plugin, key) -> pod keys
        # (when the pod is due for the leftover flush, pool_seq, pod); stale entries die lazily
        self._pool_deadlines: list[tuple[float, int, QueuedPodInfo]] = []

    # -- introspection ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, key: str) -> bool:
        return key in self._pods

    def info(self, key: str) -> QueuedPodInfo | None:
        return self._pods.get(key)

    def counts(self) -> dict[str, int]:
        """Pods per queue, without walking the pods (thousands may wait in the pool): only the
        backoff heap is looked at, which holds the few pods that failed recently."""
        backoff = sum(1 for _, seq, qpi in self._backoff if qpi.where == BACKOFF and qpi.seq == seq)
        unschedulable = len(self._unschedulable)
        in_flight = sum(1 for key in self._in_flight if key in self._pods)
        active = len(self._pods) - backoff - unschedulable - in_flight
        return {ACTIVE: active, BACKOFF: backoff, UNSCHEDULABLE: unschedulable, IN_FLIGHT: in_flight}

    def backoff_seconds(self, attempts: int) -> float:
        cfg = self.config
        if attempts > 64:
            return cfg.max_backoff_seconds
        duration = cfg.initial_backoff_seconds * (1 << max(attempts - 1, 0))
        return min(duration, cfg.max_backoff_seconds)

    # -- pods coming and going ----------------------------------------------------------------------
    def add(self, pod: Pod) -> None:
        """A new unscheduled pod (or one seen again): PreEnqueue decides active vs gated."""
        key = pod_key(pod)
        if key in self._pods:
            self.update(pod)
            return
        qpi = QueuedPodInfo(pod, self.clock())
        self._pods[key] = qpi
        self._enqueue_checked(qpi)

    def update(self, pod: Pod) -> None:
        key = pod_key(pod)
        qpi = self._pods.get(key)
        if qpi is None:
            self.add(pod)
            return
        old = qpi.pod
        qpi.pod = pod
        if old.metadata.uid != pod.metadata.uid:
            qpi.attempts = 0
        event = ClusterEvent(EventResource.UNSCHEDULED_POD, pod_update_action(old, pod), old, pod)
        if qpi.where == IN_FLIGHT:
            self._in_flight.setdefault(key, []).append(event)
        elif qpi.where == UNSCHEDULABLE:
            if qpi.gated_reason or self._worth_requeue(qpi, event):  # gated: PreEnqueue again
                self._move(qpi)
            else:
                self._pool_add(qpi)  # re-index: the pod's keys may have changed

    def delete(self, namespace: str, name: str) -> None:
        """The pod is gone or bound: forget it wherever it is (heap entries die lazily)."""
        key = f"{namespace}/{name}"
        self._reserved.pop(key, None)
        qpi = self._pods.pop(key, None)
        if qpi is not None:
            self._pool_remove(qpi)
            self._in_flight.pop(key, None)
            qpi.where = ""

    # -- the scheduling loop ------------------------------------------------------------------------
    def pop(self) -> QueuedPodInfo | None:
        """The next pod to schedule, or None when nothing is active right now."""
        self.flush()
        while self._active:
            _, _, seq, qpi = heapq.heappop(self._active)
            if qpi.where != ACTIVE or qpi.seq != seq:
                continue
            return self._take(qpi)
        while self._backoff_early:  # nothing active: the backoff that ends first, early
            _, seq, qpi = heapq.heappop(self._backoff_early)
            if qpi.where == BACKOFF and qpi.seq == seq:
                return self._take(qpi)
        return None

    def _take(self, qpi: QueuedPodInfo) -> QueuedPodInfo:
        qpi.where = IN_FLIGHT
        qpi.attempts += 1
        self._in_flight[qpi.key] = []
        return qpi

    def done(self, key: str) -> None:
        """The cycle reserved a node: the pod leaves the queue (the saga owns it now)."""
        self._in_flight.pop(key, None)
        qpi = self._pods.pop(key, None)
        if qpi is not None:
            qpi.where = ""
            if len(self._reserved) >= 65536:
                self._reserved.clear()
            self._reserved[key] = qpi.attempts

    def add_unschedulable(self, qpi: QueuedPodInfo, plugins: Iterable[str]) -> None:
        """After an Unschedulable decision for a popped pod."""
        events = self._in_flight.pop(qpi.key, None)
        if self._pods.get(qpi.key) is not qpi:
            return  # deleted while in flight
        qpi.unschedulable_plugins = frozenset(plugins)
        qpi.timestamp = self.clock()
        if not qpi.unschedulable_plugins or (events and any(self._worth_requeue(qpi, e) for e in events)):
            self._to_backoff_or_active(qpi)
            return
        self._pool_add(qpi)

    def add_backoff(self, qpi: QueuedPodInfo) -> None:
        """After an error (or a failed binding): retry after the backoff, whatever happens."""
        self._in_flight.pop(qpi.key, None)
        if self._pods.get(qpi.key) is not qpi:
            self._pods[qpi.key] = qpi  # a pod handed back by the saga
        qpi.unschedulable_plugins = frozenset()
        qpi.timestamp = self.clock()
        self._push_backoff(qpi)

    def requeue(self, pod: Pod) -> QueuedPodInfo:
        """A pod whose binding failed after it left the queue (saga compensation): backoff,
        keeping its attempt count."""
        key = pod_key(pod)
        attempts = self._reserved.pop(key, 1)
        qpi = self._pods.get(key)
        if qpi is None:
            qpi = QueuedPodInfo(pod, self.clock())
            qpi.attempts = attempts
        qpi.pod = pod
        self.add_backoff(qpi)
        return qpi

    # -- events and time ---------------------------------------------------------------------------
    def on_event(self, event: ClusterEvent | None) -> int:
        """Move waiting pods this event may help (queueing hints); returns how many moved."""
        if event is None:
            return 0
        for events in self._in_flight.values():
            events.append(event)
        candidates: dict[str, QueuedPodInfo] = {}
        action = int(event.action)
        for plugin, reg in self._by_resource.get(event.resource, ()):
            if not int(reg.actions) & action:
                continue
            key = reg.narrow(event) if reg.narrow is not None and plugin in self._queue_keys else None
            if key is None:
                candidates = self._unschedulable
                break
            for pod in self._pool_index.get((plugin, key), ()):
                candidates[pod] = self._unschedulable[pod]
        moved = 0
        for qpi in list(candidates.values()):
            if self._worth_requeue(qpi, event):
                moved += self._move(qpi)
        return moved

    def flush(self) -> None:
        """Backoff expired → active; pods waiting too long in the pool → retried."""
        now = self.clock()
        while self._backoff and self._backoff[0][0] <= now:
            _, seq, qpi = heapq.heappop(self._backoff)
            if qpi.where == BACKOFF and qpi.seq == seq:
                self._push_active(qpi)
        early = self._backoff_early
        while early and early[0][0] <= now:  # moved to active just above, or stale
            heapq.heappop(early)
        heap = self._pool_deadlines
        while heap and heap[0][0] < now:
            _, seq, qpi = heapq.heappop(heap)
            if qpi.where == UNSCHEDULABLE and qpi.pool_seq == seq and self._unschedulable.get(qpi.key) is qpi:
                qpi.flushed_at = now
                self._move(qpi)

    def next_wakeup(self) -> float | None:
        """When the next backoff expires (for the service's timer), None if nothing backs off."""
        while self._backoff:
            expiry, seq, qpi = self._backoff[0]
            if qpi.where == BACKOFF and qpi.seq == seq:
                return expiry
            heapq.heappop(self._backoff)
        return None

    # -- internals ------------------------------------------------------------------------------------
    def _worth_requeue(self, qpi: QueuedPodInfo, event: ClusterEvent) -> bool:
        plugins = qpi.unschedulable_plugins
        if not plugins:
            return True
        resource, action = event.resource, int(event.action)
        for name in plugins:
            for reg_resource, actions, hint in self._hints.get(name, ()):
                if reg_resource != resource or not actions & action:
                    continue
                if hint is None:
                    return True
                try:
                    if hint(qpi.pod, event, self.cluster) == QueueingHint.QUEUE:
                        return True
                except Exception:  # a failing hint must not strand the pod (upstream: Queue)
                    return True
        return False

    def _move(self, qpi: QueuedPodInfo) -> int:
        """Out of the pool: gated pods re-run PreEnqueue; others go to backoff or active."""
        self._pool_remove(qpi)
        if qpi.gated_reason:
            return int(self._enqueue_checked(qpi))
        self._to_backoff_or_active(qpi)
        return 1

    def _enqueue_checked(self, qpi: QueuedPodInfo) -> bool:
        for plugin in self.profile.pre_enqueue:
            status = plugin.pre_enqueue(qpi.pod, self.cluster)
            if status is not None:
                qpi.gated_reason = status.message
                qpi.unschedulable_plugins = frozenset((plugin.name,))
                self._pool_add(qpi)
                return False
        qpi.gated_reason = ""
        if qpi.attempts and self.clock() < qpi.timestamp + self.backoff_seconds(qpi.attempts):
            self._push_backoff(qpi)
        else:
            self._push_active(qpi)
        return True

    def _pool_add(self, qpi: QueuedPodInfo) -> None:
        self._pool_remove(qpi)
        qpi.where = UNSCHEDULABLE
        self._unschedulable[qpi.key] = qpi
        due = qpi.timestamp + self.config.max_unschedulable_seconds
        if qpi.flushed_at is not None:
            due = max(due, qpi.flushed_at + self.config.unschedulable_flush_interval_seconds)
        self._seq += 1
        qpi.pool_seq = self._seq
        heap = self._pool_deadlines
        if len(heap) > 2 * len(self._unschedulable) + 1024:  # re-indexing left many stale entries
            heap[:] = [e for e in heap if e[2].where == UNSCHEDULABLE and e[2].pool_seq == e[1]]
            heapq.heapify(heap)
        heapq.heappush(heap, (due, qpi.pool_seq, qpi))
        for plugin in qpi.unschedulable_plugins:
            keys = self._queue_keys.get(plugin)
            if keys is None:
                continue
            for key in keys(qpi.pod):
                entry = (plugin, key)
                self._pool_index.setdefault(entry, set()).add(qpi.key)
                qpi.index_keys.append(entry)

    def _pool_remove(self, qpi: QueuedPodInfo) -> None:
        if self._unschedulable.get(qpi.key) is qpi:
            del self._unschedulable[qpi.key]
            if not self._unschedulable:  # every deadline left is stale: a drained pool keeps none
                self._pool_deadlines.clear()
        for entry in qpi.index_keys:
            pods = self._pool_index.get(entry)
            if pods is not None:
                pods.discard(qpi.key)
                if not pods:
                    del self._pool_index[entry]
        qpi.index_keys = []

    def _to_backoff_or_active(self, qpi: QueuedPodInfo) -> None:
        if self.clock() < qpi.timestamp + self.backoff_seconds(qpi.attempts):
            self._push_backoff(qpi)
        else:
            self._push_active(qpi)

    def _push_active(self, qpi: QueuedPodInfo) -> None:
        self._seq += 1
        qpi.seq = self._seq
        qpi.where = ACTIVE
        heapq.heappush(self._active, (-qpi.priority, qpi.timestamp, qpi.seq, qpi))

    def _push_backoff(self, qpi: QueuedPodInfo) -> None:
        self._seq += 1
        qpi.seq = self._seq
        qpi.where = BACKOFF
        expiry = qpi.timestamp + self.backoff_seconds(qpi.attempts)
        heapq.heappush(self._backoff, (expiry, qpi.seq, qpi))
        if qpi.unschedulable_plugins:
            heapq.heappush(self._backoff_early, (expiry, qpi.seq, qpi))
