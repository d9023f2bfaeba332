"""The saga engine: runs saga definitions step by step, persisting every move as a saga event.

Before a step runs, ``SagaStepStarted`` registers its compensation; the step's result is recorded
by ``SagaStepCompleted``. Three shortcuts save round trips on hot sagas (see
:mod:`draflow.events.saga`): a step declared ``logs_start=False`` (its effect shows it ran, its
compensation undoes only what the log shows) has its compensation registered in ``SagaStarted``
instead; a ``local`` step (an effect in memory, or idempotent writes a re-run finds in place:
redone by whichever process drives the saga) logs neither start nor completion; and a step may
record its completion in the atomic batch of its effect (``StepContext.append(...,
complete=output)``), together with ``SagaCompleted`` when it is the last step. Transient failures
(:class:`~draflow.infra.errors.TransientError`, store unavailability) are retried with tenacity
(bounded, exponential, jittered); anything else, or exhausted retries, records ``SagaStepFailed``
and compensates every started step in reverse order. A crash at any point leaves a saga whose
events say exactly what is done and what is owed: :meth:`SagaEngine.resume_pending` (run by
whichever instance starts next, finding the unfinished sagas from the previous start's snapshot:
:mod:`draflow.sagas.pending`) continues it, forward or backward. Steps and compensations must be
idempotent; :class:`StepContext` gives them deterministic ids and appends so that a re-run after a
crash has no second effect.

A saga is declared as data: a :class:`SagaDefinition` (a module-level constant) names its input
Struct and lists its :class:`Step` s, each a module-level function of the :class:`StepContext`.
The context carries the saga's input, decoded into that Struct (stored in ``SagaStarted`` as its
JSON form, so any instance can resume it), and ``deps``: what the service that runs the saga gave
its engine (the scheduler service, the driver controller's plugins and claim store).

Every saga is one trace: step spans are children of the ``SagaStarted`` append's span, also when
another process resumes the saga.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any, Generic, TypeVar, cast

import msgspec

from draflow.events.envelope import Envelope, Event
from draflow.events.saga import (
    SagaCompensated,
    SagaCompensationFailed,
    SagaCompleted,
    SagaStarted,
    SagaStepCompensated,
    SagaStepCompleted,
    SagaStepFailed,
    SagaStepStarted,
)
from draflow.events.subjects import aggregate_subject
from draflow.infra import metrics, tracing
from draflow.infra.errors import ConcurrencyError, TransientError
from draflow.infra.eventstore import EventStore
from draflow.infra.guard import Guard, GuardConflict
from draflow.infra.retry import transient_retry
from draflow.sagas.pending import PendingSagas
from draflow.sagas.state import SagaState, SagaStatus, apply, decide

__all__ = [
    "NoInput",
    "SagaDefinition",
    "SagaEngine",
    "SagaMoved",
    "SagaState",
    "SagaStatus",
    "Step",
    "StepContext",
    "pod_attributes",
]

log = logging.getLogger(__name__)

_SAGA_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
SAGA_KIND = "Saga"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

# (saga id, traceparent of the span that covers its run in this process): the steps' parent. Set
# by ``start`` (the saga's own span) or by ``run`` resuming a saga another process started (a
# "resumed" span: the process that started it was stopped before its saga span could end).
_covering: ContextVar[tuple[str, str]] = ContextVar("draflow_saga_covering", default=("", ""))


def pod_attributes(inp: dict[str, Any]) -> dict[str, str]:
    """``k8s.pod.name`` / ``k8s.namespace.name`` of the pod a saga is about (from its input), so a
    trace viewer finds the saga's spans by pod."""
    if "pod_name" in inp:
        return {"k8s.pod.name": str(inp["pod_name"]), "k8s.namespace.name": str(inp.get("pod_namespace", ""))}
    if "name" in inp and "node_name" in inp:  # PodScheduling
        return {"k8s.pod.name": str(inp["name"]), "k8s.namespace.name": str(inp.get("namespace", ""))}
    return {}


def _step_metric(state: SagaState, step: str, result: str) -> None:
    metrics.SAGA_STEPS.labels(saga=state.saga_type, step=step, result=result).inc()


In = TypeVar("In", bound=msgspec.Struct)
Deps = TypeVar("Deps")


class SagaMoved(Exception):
    """A step's batch carried the saga's progress, but the saga moved on meanwhile (another
    instance drives it): nothing of the batch landed; the engine reloads the saga and decides
    again. Deliberately not a ConcurrencyError, which steps catch for their own aggregates."""


class NoInput(msgspec.Struct, frozen=True, kw_only=True):
    """The input of a saga that needs none."""


class StepContext(Generic[In, Deps]):
    """What a step or compensation gets: the saga, its typed input, the service's ``deps``, earlier
    outputs, idempotent appends."""

    def __init__(self, engine: SagaEngine, state: SagaState, inp: In, index: int, compensating: bool) -> None:
        self.engine = engine
        self.store = engine.store
        self.deps: Deps = cast(Deps, engine.deps)
        self.saga_id = state.saga_id
        self.saga_type = state.saga_type
        self.input: In = inp
        self.outputs = state.outputs
        self.index = index
        self.step = state.steps[index]
        self.compensating = compensating
        self.attempt = 0
        self._state = state
        self.logged = True  # False for a local step: nothing of its progress is logged
        # the saga events this step's own batch recorded (its completion...), with their sequences
        self.recorded: list[tuple[Event, int]] = []

    def msg_id(self, suffix: str = "") -> str:
        """A deterministic id for an effect of this step: a re-run produces the same id."""
        phase = "undo" if self.compensating else "do"
        return f"saga:{self.saga_id}:{self.index}:{phase}" + (f":{suffix}" if suffix else "")

    async def append(
        self,
        subject: str,
        events: Event | Sequence[Event],
        *,
        expected_last_seq: int | None,
        suffix: str = "",
        guards: Sequence[Guard] = (),
        complete: dict[str, Any] | None = None,
    ) -> tuple[int, ...]:
        """Append on behalf of the saga: deterministic msg id, correlation = the saga id
        (``guards``: guard messages in the same atomic batch, :mod:`draflow.infra.guard`).

        ``complete``: this append is the step's last effect; when it is an atomic batch anyway
        (several events, guards), record the step's completion with this output (and
        ``SagaCompleted`` after the saga's last step) in the same batch, at the saga's version,
        so the effect and the saga's progress land together or not at all (otherwise the engine
        records the completion after the step, as usual). :class:`SagaMoved` when the saga moved
        meanwhile."""
        n = 1 if isinstance(events, Event) else len(events)
        # only on an append that is an atomic batch anyway: JetStream stages every batch of a
        # file-backed R1 stream in a file store of its own (~2.5 ms of server CPU, ~15 ms per
        # batch measured), far more than the single appends it would save
        progress = self._progress(complete) if n + len(guards) > 1 else []
        try:
            seqs = await self.store.append(
                subject,
                events,
                expected_last_seq=expected_last_seq,
                msg_id=self.msg_id(suffix),
                correlation_id=self.saga_id,
                guards=(*guards, *progress),
            )
        except GuardConflict as conflict:
            if progress and progress[0].subject in conflict.subjects:
                raise SagaMoved(self.saga_id) from conflict
            raise
        if progress:
            first = seqs[0] + len(seqs) + len(guards)
            self.recorded = [(g.event, first + i) for i, g in enumerate(progress)]
        return seqs

    def _progress(self, complete: dict[str, Any] | None) -> list[Guard]:
        # only for steps whose start is implied: a saga started before the shortcuts goes on
        # recording its steps' events as it did
        implied = self.index in self._state.implied
        if complete is None or self.compensating or self.recorded or not implied or not self.logged:
            return []
        subject = self.engine.subject(self.saga_id)
        out = [
            Guard(
                subject,
                SagaStepCompleted(step=self.step, index=self.index, output=complete),
                self._state.version,
            )
        ]
        state = self._state
        if all(n in state.outputs for n in state.steps if n != self.step):
            out.append(Guard(subject, SagaCompleted(), None))
        return out


StepFn = Callable[[StepContext[Any, Any]], Awaitable[dict[str, Any] | None]]
CompensateFn = Callable[[StepContext[Any, Any]], Awaitable[object]]  # its result is not recorded


class Step(msgspec.Struct, frozen=True):
    name: str
    action: StepFn
    compensate: CompensateFn | None = None
    # False: no SagaStepStarted; the step's effect shows it ran, and its compensation undoes
    # only what the log shows, so it is owed from the moment the saga reaches the step
    logs_start: bool = True
    # not logged: neither its start nor its completion is a saga event, so whichever process
    # drives the saga runs it again; for an effect in memory, or writes a re-run finds in place
    # (idempotent and cheap to re-check), whose compensation undoes only what the log shows
    local: bool = False


class SagaDefinition(msgspec.Struct, frozen=True):
    """A saga type: its steps in order and the Struct its input decodes into."""

    saga_type: str
    steps: tuple[Step, ...]
    input_type: type[msgspec.Struct] = NoInput

    def decode_input(self, stored: dict[str, Any]) -> msgspec.Struct:
        """The input as ``SagaStarted`` stored it (the Struct's JSON form), as the Struct."""
        return msgspec.convert(stored, self.input_type)


class SagaEngine:
    def __init__(
        self,
        store: EventStore,
        definitions: Sequence[SagaDefinition],
        *,
        retry_attempts: int = 5,
        retry_initial_s: float = 0.05,
        retry_max_wait_s: float = 2.0,
        on_event: Callable[[SagaState, Event], Awaitable[None] | None] | None = None,
        deps: object = None,
    ) -> None:
        """``deps``: what the steps need from the service that runs them (``StepContext.deps``)."""
        self.store = store
        self.deps = deps
        self.definitions = {d.saga_type: d for d in definitions}
        self.retry_attempts = retry_attempts
        self.retry_initial_s = retry_initial_s
        self.retry_max_wait_s = retry_max_wait_s
        self.on_event = on_event  # observability hook, called after each saga event is stored
        self.pending = PendingSagas(store, self.subject("x")[: -len("x")])  # resume_pending's finder

    def subject(self, saga_id: str) -> str:
        return aggregate_subject(SAGA_KIND, None, saga_id, self.store.root)

    async def load(self, saga_id: str) -> SagaState | None:
        loaded = await self.store.load(self.subject(saga_id), apply, None)
        return loaded.state

    async def start(
        self,
        saga_type: str,
        saga_id: str,
        input: msgspec.Struct | None = None,
        *,
        decided_at_seq: int = 0,
        traceparent: str = "",
    ) -> SagaState:
        """Start (or, if it already exists, resume) a saga and run it to a terminal state.

        ``traceparent`` (the triggering event's, e.g. the pod's) makes the saga a child span in
        that trace instead of a new root: one trace per pod flow. ``decided_at_seq`` records the
        log position the decision was taken on (for ``draflow verify-replay``).
        """
        if not _SAGA_ID.match(saga_id):
            raise ValueError(f"saga id {saga_id!r}: must match {_SAGA_ID.pattern}")
        definition = self.definitions.get(saga_type)
        if definition is None:
            raise ValueError(f"unknown saga type {saga_type!r}")
        inp = definition.input_type() if input is None else input
        if not isinstance(inp, definition.input_type):
            raise TypeError(f"saga {saga_type}: input must be {definition.input_type.__name__}, not {inp!r}")
        stored: dict[str, Any] = msgspec.to_builtins(inp)
        attrs = {"draflow.saga.id": saga_id, "draflow.saga.type": saga_type, **pod_attributes(stored)}
        subject = self.subject(saga_id)
        event = SagaStarted(
            saga_type=saga_type,
            input=stored,
            steps=[s.name for s in definition.steps],
            decided_at_seq=decided_at_seq,
            implied_starts={
                i: f"{s.name}:compensate" if s.compensate else ""
                for i, s in enumerate(definition.steps)
                if not s.logs_start or s.local
            },
            local_steps=[i for i, s in enumerate(definition.steps) if s.local],
        )
        with tracing.span(f"saga {saga_type}", traceparent=traceparent, attributes=attrs):
            try:
                (seq,) = await self.store.append(
                    subject,
                    event,
                    expected_last_seq=0,
                    msg_id=f"saga:{saga_id}:started",
                    correlation_id=saga_id,
                )
            except ConcurrencyError:
                started = None  # started before (by us or another instance): resume it from the log
            else:
                # the state folds from the event just stored (same reducer, its sequence): reading
                # it back would cost a round trip per saga and tell us nothing new
                started = apply(
                    None,
                    Envelope(
                        id="",
                        type=SagaStarted.type_name(),
                        schema=SagaStarted.SCHEMA,
                        subject=subject,
                        time=_EPOCH,
                        data=event,
                        traceparent=tracing.current_traceparent(),
                        seq=seq,
                    ),
                )
            # inside the saga's span: a parent covers its children (the steps and compensations)
            token = _covering.set((saga_id, tracing.current_traceparent()))
            try:
                return await self.run(saga_id, started, inp if started is not None else None)
            finally:
                _covering.reset(token)

    async def run(
        self, saga_id: str, state: SagaState | None = None, inp: msgspec.Struct | None = None
    ) -> SagaState:
        """Drive a saga from its stored state (``state``, or read from the log) until it is terminal.

        ``inp``: the input as its Struct when the caller has it (else decoded from the state)."""
        if state is None:
            state = await self.load(saga_id)
        if state is None:
            raise LookupError(f"saga {saga_id}: not found")
        definition = self.definitions[state.saga_type]
        if inp is None:
            inp = definition.decode_input(state.input)
        if _covering.get()[0] == saga_id or state.status.terminal or not tracing.enabled():
            return await self._drive(definition, saga_id, state, inp)
        attrs = {
            "draflow.saga.id": saga_id,
            "draflow.saga.type": state.saga_type,
            **pod_attributes(state.input),
        }
        name = f"saga {state.saga_type} (resumed)"
        with tracing.span(name, traceparent=state.traceparent, attributes=attrs):
            token = _covering.set((saga_id, tracing.current_traceparent()))
            try:
                return await self._drive(definition, saga_id, state, inp)
            finally:
                _covering.reset(token)

    async def _drive(
        self, definition: SagaDefinition, saga_id: str, state: SagaState, inp: msgspec.Struct
    ) -> SagaState:
        while True:
            action = decide(state)
            if action.kind == "none":
                return state
            try:
                state = await self._act(definition, state, inp, action)
            except (ConcurrencyError, SagaMoved):
                # another instance moved the saga on: reload and decide again
                reloaded = await self.load(saga_id)
                assert reloaded is not None
                state = reloaded

    async def _record(self, state: SagaState, event: Event) -> SagaState:
        subject = self.subject(state.saga_id)
        with tracing.within(state.traceparent):  # the saga's events belong to the saga's trace
            (seq,) = await self._append_saga_event(subject, state, event)
        return await self._recorded(state, subject, event, seq)

    async def _append_saga_event(self, subject: str, state: SagaState, event: Event) -> tuple[int, ...]:
        return await self.store.append(
            subject,
            event,
            expected_last_seq=state.version,
            # deterministic per position *and* move: a retry is de-duplicated, a different move
            # that another instance recorded at this position shows up as a conflict
            msg_id=f"saga:{state.saga_id}:{state.version}:{type(event).type_name()}",
            correlation_id=state.saga_id,
        )

    def _fold(self, state: SagaState, event: Event, seq: int, subject: str = "") -> SagaState:
        """The state after ``event`` at ``seq`` without a read (or an append, for a local step)."""
        env = Envelope(
            id="",
            type=type(event).type_name(),
            schema=type(event).SCHEMA,
            subject=subject or self.subject(state.saga_id),
            time=_EPOCH,
            data=event,
            seq=seq,
        )
        new = apply(state, env)
        assert new is not None
        return new

    async def _recorded(self, state: SagaState, subject: str, event: Event, seq: int) -> SagaState:
        new = self._fold(state, event, seq, subject)
        if new.status.terminal:
            metrics.SAGA_OUTCOMES.labels(saga=new.saga_type, outcome=new.status.value).inc()
        if self.on_event is not None:
            result = self.on_event(new, event)
            if asyncio.iscoroutine(result):
                await result
        return new

    async def _act(
        self, definition: SagaDefinition, state: SagaState, inp: msgspec.Struct, action: Any
    ) -> SagaState:
        if action.kind == "complete":
            return await self._record(state, SagaCompleted())
        if action.kind == "compensated":
            return await self._record(state, SagaCompensated())
        step = definition.steps[action.index]
        if action.kind == "run":
            if action.index not in state.started and action.index not in state.implied:
                comp = f"{step.name}:compensate" if step.compensate else ""
                state = await self._record(
                    state, SagaStepStarted(step=step.name, index=action.index, compensation=comp)
                )
            ctx: StepContext[Any, Any] = StepContext(self, state, inp, action.index, False)
            ctx.logged = not (step.local and action.index in state.implied)
            ok, result, attempts = await self._attempt(step.action, ctx, step.name)
            completed = SagaStepCompleted(step=step.name, index=action.index, output=result or {})
            if ok and ctx.recorded:  # landed with the step's effect
                for event, seq in ctx.recorded:
                    state = await self._recorded(state, self.subject(state.saga_id), event, seq)
                return state
            if ok and step.local and action.index in state.implied:
                return self._fold(state, completed, state.version)  # in memory only
            if ok:
                return await self._record(state, completed)
            return await self._record(
                state,
                SagaStepFailed(step=step.name, index=action.index, error=str(result), attempts=attempts),
            )
        assert step.compensate is not None
        undo: StepContext[Any, Any] = StepContext(self, state, inp, action.index, True)
        ok, result, _ = await self._attempt(step.compensate, undo, step.name)
        if ok:
            return await self._record(state, SagaStepCompensated(step=step.name, index=action.index))
        return await self._record(
            state, SagaCompensationFailed(step=step.name, index=action.index, error=str(result))
        )

    async def _attempt(
        self, fn: Callable[[StepContext[Any, Any]], Awaitable[Any]], ctx: StepContext[Any, Any], name: str
    ) -> tuple[bool, Any, int]:
        """Run a step or compensation with bounded retries; (ok, result or error text, attempts).
        :class:`SagaMoved` propagates: the engine reloads the saga and decides again."""
        state, undo = ctx._state, ctx.compensating
        span_name = f"{'compensate' if undo else 'step'} {name}"
        attrs = {
            "draflow.saga.id": state.saga_id,
            "draflow.saga.type": state.saga_type,
            "draflow.saga.step": name,
            **pod_attributes(state.input),
        }
        covering_id, covering = _covering.get()
        parent = covering if covering_id == state.saga_id and covering else state.traceparent
        with tracing.span(span_name, traceparent=parent, attributes=attrs) as span:
            try:
                ctx.attempt = 1
                try:  # the first attempt without building a retry policy: the common case
                    out = await fn(ctx)
                except TransientError:
                    if self.retry_attempts <= 1:
                        raise
                    out = await self._retry(fn, ctx, state, span_name)
                _step_metric(state, span_name, "ok")
                return True, out, ctx.attempt
            except SagaMoved:
                raise
            except TransientError as exc:
                err = f"gave up after {ctx.attempt} attempts: {type(exc).__name__}: {exc}"
            except Exception as exc:  # a permanent failure: compensate
                err = f"{type(exc).__name__}: {exc}"
            _step_metric(state, span_name, "failed")
            if span is not None:
                span.set_attribute("error.type", err.split(":")[0])
            log.info("saga %s: %s failed: %s", state.saga_id, span_name, err)
            return False, err, ctx.attempt
        raise AssertionError("unreachable")

    async def _retry(
        self,
        fn: Callable[[StepContext[Any, Any]], Awaitable[Any]],
        ctx: StepContext[Any, Any],
        state: SagaState,
        span_name: str,
    ) -> Any:
        """Attempts 2 to ``retry_attempts`` after a transient failure (bounded, exponential,
        jittered; the last failure is raised)."""
        await asyncio.sleep(self.retry_initial_s)
        async for attempt in transient_retry(
            attempts=self.retry_attempts - 1,
            initial_s=self.retry_initial_s,
            max_wait_s=self.retry_max_wait_s,
        ):
            with attempt:
                ctx.attempt = attempt.retry_state.attempt_number + 1
                _step_metric(state, span_name, "retried")
                return await fn(ctx)
        raise AssertionError("unreachable")

    async def resume_pending(self, *, concurrency: int = 16) -> list[SagaState]:
        """Run every unfinished saga of the types this engine knows to a terminal state."""
        pending = await self.pending.find()  # from the last start's snapshot, not every saga
        sem = asyncio.Semaphore(concurrency)

        async def one(saga_id: str) -> SagaState | None:
            async with sem:
                state = await self.load(saga_id)
                if state is None or state.saga_type not in self.definitions or state.status.terminal:
                    return state
                return await self.run(saga_id)

        results = await asyncio.gather(*(one(s) for s in pending))
        return [s for s in results if s is not None]
