"""The scheduler service: snapshot from the log, scheduling cycles, one saga per decision.

``SchedulerService.run(stop)``:

1. fold the log into the snapshot (:class:`Snapshot`) and keep following it;
2. resume the sagas a previous instance left unfinished (forward or backward), then catch up
   again, so no decision is taken before what was already decided is in the log;
3. loop: pop the next pod and run its cycle (the pure core), then act on the result —
   ``Reserved`` starts a PodScheduling saga (a task; up to ``max_sagas`` in flight, the rest of
   the queue waits), ``Unschedulable`` appends ``PodUnschedulable`` and records a Warning
   ``FailedScheduling`` event (and starts a Reallocation saga when PostFilter chose a claim to
   free), ``SchedulingError`` does the same with reason ``SchedulerError``; a request the
   allocator's diagnosis found lacking also gets a Warning ``CannotAllocate`` event on the pod
   and on its claim. The loop sleeps until
   a log batch, a finished saga or the next backoff expiry wakes it.

Decisions use no wall clock or randomness: only the consumed events (the snapshot position is part
of the saga id) and this instance's in-flight decisions (the assume cache).
On ``stop`` no new cycle starts; in-flight sagas get ``grace_s`` to finish, the rest are
cancelled and left for the next instance to resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import re
import time
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec

from draflow.events.api.codec import encode_object
from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.dra import MAX_REJECTIONS, NodeRejection, PodUnschedulable
from draflow.events.envelope import Envelope, Event
from draflow.events.subjects import aggregate_subject
from draflow.infra import metrics, tracing
from draflow.infra.errors import ConcurrencyError
from draflow.infra.eventstore import EventStore
from draflow.sagas.engine import SagaEngine, SagaState, SagaStatus
from draflow.services.dra.structured.diagnosis import event_message
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import StatusError
from draflow.services.scheduler.framework import (
    Reserved,
    Scheduler,
    SchedulerConfig,
    SchedulingError,
    Unschedulable,
)
from draflow.services.scheduler.plugins import default_plugins
from draflow.services.scheduler.sagas.extended_claim import (
    EXTENDED_CLAIM_CLEANUP,
    EXTENDED_CLAIM_CLEANUP_SAGA,
    ExtendedClaimCleanupInput,
)
from draflow.services.scheduler.sagas.numeric_reallocation import (
    NUMERIC_REALLOCATION,
    NUMERIC_REALLOCATION_SAGA,
)
from draflow.services.scheduler.sagas.pod_scheduling import (
    POD_SCHEDULING,
    POD_SCHEDULING_SAGA,
    PodSchedulingInput,
)
from draflow.services.scheduler.sagas.reallocation import REALLOCATION, REALLOCATION_SAGA, ReallocationInput
from draflow.services.scheduler.service.snapshot import Snapshot

__all__ = ["SchedulerService", "instance_name"]

log = logging.getLogger(__name__)

COMPONENT = "default-scheduler"  # reportingController / source.component of scheduler Events
# draflow's own Event reason (no upstream counterpart): what one claim request lacked
CANNOT_ALLOCATE = "CannotAllocate"
# cycle outcome -> the allocation histogram's result label
_RESULT_LABEL = {"Reserved": "scheduled", "Unschedulable": "unschedulable", "SchedulingError": "error"}
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def instance_name(raw: str) -> str:
    """The instance id as used in saga ids, the log's actor and Events (``[A-Za-z0-9_-]``, ≤ 40)."""
    return _UNSAFE.sub("-", raw)[:40] or "scheduler"


def _utcnow() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SchedulerService:
    def __init__(
        self,
        store: EventStore,
        *,
        instance: str = "scheduler",
        config: SchedulerConfig | None = None,
        api: ApiClient | None = None,
        max_sagas: int = 256,
        record_scheduled_events: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.instance = instance_name(instance)
        self.api = api
        self.max_sagas = max_sagas
        self.record_scheduled_events = record_scheduled_events
        self.clock = clock
        self.core = Scheduler(config, plugins=default_plugins(), clock=clock)
        self.snapshot = Snapshot(store, self.core)
        self.engine = SagaEngine(
            store,
            [POD_SCHEDULING_SAGA, REALLOCATION_SAGA, EXTENDED_CLAIM_CLEANUP_SAGA, NUMERIC_REALLOCATION_SAGA],
            deps=self,
        )
        self._wake = asyncio.Event()
        self._sagas: set[asyncio.Task[Any]] = set()
        self._side: set[asyncio.Task[Any]] = set()
        self._saga_ids: set[str] = set()
        self._ids_position = 0
        self._started = False
        self._metrics_at = 0.0
        self.outcomes: dict[str, int] = {"completed": 0, "compensated": 0, "failed": 0, "unschedulable": 0}

    # -- the SchedulerHost the sagas use-----------------------------------------------------------------
    def get(self, kind: str, namespace: str, name: str) -> tuple[Any, int]:
        return self.snapshot.get(kind, namespace, name)

    async def load(self, kind: str, namespace: str, name: str) -> tuple[Any, int]:
        return await self.snapshot.load(kind, namespace, name)

    async def history(self, kind: str, namespace: str, name: str) -> list[Envelope[Event]]:
        return await self.store.events(self.subject(kind, namespace, name))

    async def history_since(self, kind: str, namespace: str, name: str, seq: int) -> list[Envelope[Event]]:
        """The subject's events after stream sequence ``seq`` (a capacity ledger since a decision)."""
        return await self.store.events(self.subject(kind, namespace, name), from_seq=seq + 1)

    def subject(self, kind: str, namespace: str, name: str) -> str:
        return aggregate_subject(kind, namespace or None, name, self.store.root)

    def now(self) -> str:
        return _utcnow()

    def appended(self) -> None:
        self.snapshot.wake()

    async def admission_refusal(self, claim: ResourceClaim) -> str:
        """A server-side dry run of creating the special claim: quota admission's 403 (or a
        validation 422) as the message PreBind fails with, also recorded as a Warning Event on
        the pod. Without an API client (tests of the core alone) nothing is checked."""
        if self.api is None:
            return ""
        meta = claim.metadata
        (result,) = await self.api.apply(
            [encode_object(claim)], namespace=meta.namespace, create_only=True, dry_run=True
        )
        if result.error is None:
            return ""
        if result.error.code not in (403, 422):
            raise StatusError(result.error)  # not a decision: the step fails and is retried
        message = f'running PreBind plugin "DynamicResources": {result.error.message}'
        owner = next((o.name for o in meta.owner_references if o.kind == "Pod"), "")
        if owner:
            self._spawn(self._event("FailedScheduling", message, meta.namespace, owner, "Warning"))
        return message

    def bound(self, plan: PodSchedulingInput) -> None:
        if self.record_scheduled_events:
            message = f"Successfully assigned {plan.key} to {plan.node_name}"
            self._spawn(self._event("Scheduled", message, plan.namespace, plan.name, "Normal"))

    # -- running ------------------------------------------------------------------------------------------
    def kick(self) -> None:
        self._wake.set()

    async def start(self) -> None:
        """Catch up with the log and finish what earlier instances left (before any new decision)."""
        if self._started:
            return
        self._started = True
        await self.snapshot.start()
        resumed = await self.engine.resume_pending()
        if resumed:
            log.info("%s: resumed %d unfinished sagas", self.instance, len(resumed))
            await self.snapshot.wait_position(await self.store.stream_last_seq(), 60.0)
        self.snapshot.on_batch = self.kick

    async def run(self, stop: asyncio.Event, *, grace_s: float = 1.5) -> None:
        await self.start()
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                await self._drain(stop)
                self._wake.clear()
                waker = asyncio.create_task(self._wake.wait())
                await asyncio.wait({waker, stopping}, timeout=self._timeout(), return_when="FIRST_COMPLETED")
                waker.cancel()
        finally:
            stopping.cancel()
            await self._shutdown(grace_s)

    def _timeout(self) -> float:
        wake = self.core.queue.next_wakeup()
        if wake is None:
            return 1.0
        return min(1.0, max(0.0, wake - self.clock()) + 0.001)

    async def _drain(self, stop: asyncio.Event) -> None:
        """Run cycles while pods are ready and saga capacity is left, yielding now and then."""
        n = 0
        while not stop.is_set() and len(self._sagas) < self.max_sagas:
            started = time.perf_counter()
            step = self.core.schedule_next()
            self._queue_metrics()
            if step is None:
                return
            result_label = _RESULT_LABEL.get(type(step[1]).__name__, "error")
            metrics.ALLOCATION_SECONDS.labels(result=result_label).observe(time.perf_counter() - started)
            qpi, result = step
            self._dispatch(qpi.pod, result)
            n += 1
            if n % 8 == 0:
                await asyncio.sleep(0)  # let the log follower and the sagas move

    def _queue_metrics(self, every_s: float = 0.5) -> None:
        """``scheduler_pending_pods`` per queue; counting is O(pods), so at most every ``every_s``."""
        now = time.monotonic()
        if now - self._metrics_at < every_s:
            return
        self._metrics_at = now
        for queue, n in self.core.queue.counts().items():
            metrics.SCHEDULER_PENDING_PODS.labels(queue=queue).set(n)

    async def _shutdown(self, grace_s: float) -> None:
        pending = self._sagas | self._side
        if pending:
            _, still = await asyncio.wait(pending, timeout=grace_s)
            for task in still:
                task.cancel()
            for task in still:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self.snapshot.stop()

    def _spawn(self, coro: Coroutine[Any, Any, Any], *, saga: bool = False) -> None:
        task = asyncio.create_task(coro)
        tasks = self._sagas if saga else self._side
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        if saga:
            task.add_done_callback(lambda _: self.kick())

    def _saga_id(self, kind: str, uid: str) -> str:
        position = self.snapshot.position
        if position != self._ids_position:  # ids only repeat within one snapshot position
            self._ids_position = position
            self._saga_ids.clear()
        base = f"{self.instance}-{kind}-{_UNSAFE.sub('-', uid)[:60]}-{position}"
        saga_id, n = base, 1
        while saga_id in self._saga_ids:
            n += 1
            saga_id = f"{base}-{n}"
        self._saga_ids.add(saga_id)
        return saga_id

    # -- acting on a cycle's result ------------------------------------------------------------------
    def _dispatch(self, pod: Pod, result: Reserved | Unschedulable | SchedulingError) -> None:
        position = self.snapshot.position
        traceparent = self.snapshot.traceparent(pod.metadata.namespace, pod.metadata.name)
        if isinstance(result, Reserved):
            plan = PodSchedulingInput.of(result, self.snapshot.stamp)
            saga_id = self._saga_id("ps", plan.uid or plan.name)
            self._spawn(self._saga(POD_SCHEDULING, saga_id, plan, position, traceparent), saga=True)
            return
        self.outcomes["unschedulable"] += 1
        self._spawn(self._unschedulable(pod, diagnosis_event(result, position, self.instance), traceparent))
        if isinstance(result, Unschedulable) and result.delete_claim is not None:
            # KEP-5004: PostFilter found a special claim left over from an earlier attempt
            stale = result.delete_claim
            cleanup = ExtendedClaimCleanupInput(
                namespace=stale.namespace,
                claim_name=stale.name,
                claim_uid=stale.uid,
                pod_name=pod.metadata.name,
                pod_uid=pod.metadata.uid,
            )
            saga_id = self._saga_id("extclean", stale.uid or stale.name)
            self._spawn(
                self._saga(EXTENDED_CLAIM_CLEANUP, saga_id, cleanup, position, traceparent),
                saga=True,
            )
        if isinstance(result, Unschedulable) and result.deallocate is not None:
            ref = result.deallocate
            saga_id = self._saga_id("realloc", ref.uid or ref.name)
            inp = ReallocationInput.of(ref, pod)
            self._spawn(self._saga(REALLOCATION, saga_id, inp, position, traceparent), saga=True)

        if isinstance(result, Unschedulable) and result.deallocate_numeric is not None:
            ref = result.deallocate_numeric
            saga_id = self._saga_id("nrealloc", ref.uid or ref.name)
            inp = ReallocationInput.of(ref, pod)
            self._spawn(self._saga(NUMERIC_REALLOCATION, saga_id, inp, position, traceparent), saga=True)

    async def _saga(
        self, saga_type: str, saga_id: str, inp: msgspec.Struct, position: int = 0, traceparent: str = ""
    ) -> SagaState | None:
        try:
            state = await self.engine.start(
                saga_type, saga_id, inp, decided_at_seq=position, traceparent=traceparent
            )
        except Exception:
            log.exception("saga %s (%s) stopped by an error", saga_id, saga_type)
            self.outcomes["failed"] += 1
            return None
        if state.status is SagaStatus.COMPLETED:
            self.outcomes["completed"] += 1
        elif state.status is SagaStatus.COMPENSATED:
            self.outcomes["compensated"] += 1
        else:
            self.outcomes["failed"] += 1
        return state

    async def _unschedulable(self, pod: Pod, ev: PodUnschedulable, traceparent: str = "") -> None:
        """Record a failed attempt: a span in the pod's trace (``traceparent``: the pod's apply)
        carrying the reason and message as attributes and as a span event, around the append."""
        meta = pod.metadata
        attrs = {
            "k8s.pod.name": meta.name,
            "k8s.namespace.name": meta.namespace,
            "draflow.scheduling.result": ev.reason,
            "draflow.scheduling.message": ev.message,
            "draflow.scheduler.instance": self.instance,
            "draflow.scheduling.snapshot_seq": ev.snapshot_seq,
        }
        with tracing.span("scheduling attempt", traceparent=traceparent, attributes=attrs) as span:
            if span is not None:
                span.add_event(ev.reason, {"message": ev.message})
            await self._record_unschedulable(pod, ev)

    async def _record_unschedulable(self, pod: Pod, ev: PodUnschedulable) -> None:
        meta = pod.metadata
        reason, message = ev.reason, ev.message
        current, version = self.get("Pod", meta.namespace, meta.name)
        if isinstance(current, Pod) and current.metadata.uid == meta.uid and not current.spec.node_name:
            same = any(
                c.type == "PodScheduled"
                and c.status == "False"
                and c.reason == reason
                and c.message == message
                for c in current.status.conditions
            )
            if not same:
                ev = msgspec.structs.replace(ev, at=_utcnow())
                try:
                    await self.store.append(
                        self.subject("Pod", meta.namespace, meta.name), ev, expected_last_seq=version
                    )
                except ConcurrencyError:
                    pass  # the pod changed meanwhile: that change requeues it, nothing to record
                else:
                    self.appended()
        await self._event("FailedScheduling", message, meta.namespace, meta.name, "Warning")
        # kube-scheduler's message above is kept as upstream has it; what each request lacked
        # goes into Events of its own, on the pod and on the claim (``describe`` shows both)
        for line in ev.requests:
            if line.outcome == "fits":
                continue
            claim_ns, _, claim_name = line.claim.rpartition("/")
            pod_text = event_message(line, f"claim {line.claim}")
            await self._event(CANNOT_ALLOCATE, pod_text, meta.namespace, meta.name, "Warning")
            claim_text = event_message(line, f"pod {meta.namespace}/{meta.name}")
            await self._event(
                CANNOT_ALLOCATE,
                claim_text,
                claim_ns or meta.namespace,
                claim_name,
                "Warning",
                "ResourceClaim",
            )

    @property
    def reporting_instance(self) -> str:
        """This instance in its Events' ``reportingInstance``: upstream's ``<controller>-<host>``
        shape, with the instance id (``DRAFLOW_SCHEDULER_ID``) as the host part."""
        return f"{COMPONENT}-{self.instance}"

    async def _event(
        self, reason: str, message: str, namespace: str, name: str, type_: str, kind: str = "Pod"
    ) -> None:
        if self.api is None:
            return
        try:
            await self.api.record_event(
                kind,
                name,
                reason,
                message,
                namespace=namespace,
                type_=type_,
                component=COMPONENT,
                reporting_instance=self.reporting_instance,
            )
        except Exception as exc:  # events are best effort, as upstream's recorder
            log.warning("cannot record %s event for %s %s/%s: %s", reason, kind, namespace, name, exc)


def diagnosis_event(
    result: Unschedulable | SchedulingError, position: int = 0, instance: str = ""
) -> PodUnschedulable:
    """The ``PodUnschedulable`` a failed cycle appends: kube-scheduler's message plus a compact
    diagnosis (nodes grouped by rejecting plugin and reason, capped) for ``draflow explain``.

    Pure and without a clock (``at`` is stamped by the caller), so ``verify-replay`` can compare
    a re-decided event with the recorded one field by field."""
    if isinstance(result, SchedulingError):
        plugins = (result.plugin,) if result.plugin else ()
        return PodUnschedulable(
            message=result.message,
            reason="SchedulerError",
            unschedulable_plugins=plugins,
            snapshot_seq=position,
            instance=instance,
        )
    # reason -> the plugin that gave it (first in plugin order; plugins rarely share a reason)
    owner: dict[str, str] = {}
    for plugin, reasons in sorted(result.plugin_reasons.items()):
        for r in reasons:
            owner.setdefault(r, plugin)
    rejections = tuple(
        NodeRejection(reason=r, plugin=owner.get(r, ""), nodes=n, node_names=result.reason_nodes.get(r, ()))
        for r, n in result.node_reasons
    )
    if len(rejections) > MAX_REJECTIONS:  # keep the groups that cover the most nodes
        keep = sorted(rejections, key=lambda x: -x.nodes)[:MAX_REJECTIONS]
        rejections = tuple(x for x in rejections if x in keep)
    return PodUnschedulable(
        message=result.message,
        num_nodes=result.num_nodes,
        rejections=rejections,
        unschedulable_plugins=tuple(sorted(result.unschedulable_plugins)),
        pre_filter_message=result.pre_filter_message,
        post_filter_message=result.post_filter_message,
        snapshot_seq=position,
        instance=instance,
        requests=result.requests,
    )
