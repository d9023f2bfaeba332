"""A process that runs one kind of saga, for the crash tests (``python -m tests.sagas.saga_worker``).

The saga ``Transfer`` has three steps (reserve, charge, ship). Each step's effect is an
``EffectApplied`` event on its own subject, appended with ``expected_last_seq=0``: a re-run after a
crash gets a conflict there and knows the effect is already in place (idempotent). Compensations
append ``EffectReverted`` once. Environment switches make the process stop where the test wants to
kill it: ``PAUSE_AFTER`` (a step completed), ``PAUSE_IN`` (a step's effect applied, completion not
yet recorded), ``PAUSE_AFTER_UNDO`` (a step compensated); ``FAIL_AT`` makes a step fail permanently.
It prints ``PAUSED ...`` and waits to be killed, or ``RESULT <saga id> <status>`` at the end.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import msgspec

from draflow.events.envelope import Event
from draflow.events.saga import SagaStepCompensated, SagaStepCompleted
from draflow.events.union import register_events
from draflow.infra import tracing
from draflow.infra.config import Settings
from draflow.infra.errors import ConcurrencyError, PermanentError, TransientError
from draflow.infra.eventstore import EventStore
from draflow.sagas.engine import NoInput, SagaDefinition, SagaEngine, SagaState, Step, StepContext


def three_steps(
    fail: dict[str, int],
    permanent: set[str],
    *,
    log: list[str] | None = None,
    gate: asyncio.Event | None = None,
    input_type: type[msgspec.Struct] = NoInput,
) -> SagaDefinition:
    """Saga ``T``, steps ``a``, ``b``, ``c``, run in-process (the engine and CLI tests): a step fails
    transiently ``fail[name]`` times, a step in ``permanent`` fails for good; ``log`` records every
    move (``do b#2``, ``undo a``); with ``gate``, step ``b`` sets it and never returns (the saga
    stays Running)."""

    def action(name: str) -> Any:
        async def run(ctx: StepContext) -> dict[str, Any]:
            if log is not None:
                log.append(f"do {name}#{ctx.attempt}")
            if name == "b" and gate is not None:
                gate.set()
                await asyncio.Event().wait()  # never returns
            if fail.get(name, 0) > 0:
                fail[name] -= 1
                raise TransientError(f"{name} busy")
            if name in permanent:
                raise ValueError(f"{name} impossible")
            return {"done": name}

        return run

    def undo(name: str) -> Any:
        async def run(ctx: StepContext) -> None:
            if log is not None:
                log.append(f"undo {name}")

        return run

    steps = tuple(Step(n, action(n), undo(n)) for n in ("a", "b", "c"))
    return SagaDefinition("T", steps, input_type)


def compensation_fails() -> SagaDefinition:
    """Saga ``U``: step ``a`` succeeds and cannot be undone (``cannot undo``), step ``b`` fails
    (``no``): the saga ends CompensationFailed. Run in-process (the engine and CLI tests)."""

    async def ok(ctx: StepContext) -> None:
        return None

    async def boom(ctx: StepContext) -> None:
        raise RuntimeError("cannot undo")

    async def fail(ctx: StepContext) -> None:
        raise ValueError("no")

    return SagaDefinition("U", (Step("a", ok, boom), Step("b", fail)))


class EffectApplied(Event, frozen=True, kw_only=True):
    saga: str
    step: str


class EffectReverted(Event, frozen=True, kw_only=True):
    saga: str
    step: str


register_events(EffectApplied, EffectReverted)


def effect_subject(store: EventStore, saga_id: str, step: str) -> str:
    return store.subject("Effect", None, f"{saga_id}-{step}")


async def _pause(where: str) -> None:
    print(f"PAUSED {where}", flush=True)
    await asyncio.Event().wait()  # until SIGKILL


async def apply_effect(ctx: StepContext) -> dict[str, Any]:
    if os.environ.get("FAIL_AT") == ctx.step:
        raise PermanentError(f"{ctx.step} refused")
    subject = effect_subject(ctx.store, ctx.saga_id, ctx.step)
    try:
        (seq,) = await ctx.append(
            subject, EffectApplied(saga=ctx.saga_id, step=ctx.step), expected_last_seq=0
        )
    except ConcurrencyError:  # applied by an earlier run of this step: nothing more to do
        first = await ctx.store.events(subject)
        seq = first[0].seq
    if os.environ.get("PAUSE_IN") == ctx.step:
        await _pause(f"in {ctx.step}")
    return {"effect_seq": seq}


async def revert_effect(ctx: StepContext) -> None:
    subject = effect_subject(ctx.store, ctx.saga_id, ctx.step)
    last = await ctx.store.last(subject)
    if last is None or isinstance(last.data, EffectReverted):
        return  # never applied, or already reverted by an earlier run
    try:
        await ctx.append(subject, EffectReverted(saga=ctx.saga_id, step=ctx.step), expected_last_seq=last.seq)
    except ConcurrencyError:
        pass  # reverted concurrently: the effect is gone either way


class TransferInput(msgspec.Struct, frozen=True, kw_only=True):
    amount: int


TRANSFER = SagaDefinition(
    "Transfer",
    tuple(Step(name, apply_effect, revert_effect) for name in ("reserve", "charge", "ship")),
    TransferInput,
)


async def on_event(state: SagaState, event: Event) -> None:
    if isinstance(event, SagaStepCompleted) and os.environ.get("PAUSE_AFTER") == event.step:
        await _pause(f"after {event.step}")
    if isinstance(event, SagaStepCompensated) and os.environ.get("PAUSE_AFTER_UNDO") == event.step:
        await _pause(f"after undo {event.step}")


async def main(argv: list[str]) -> int:
    tracing.setup_tracing("saga-worker")
    store = await EventStore.open(Settings.from_env(), "saga-worker")
    engine = SagaEngine(store, [TRANSFER], on_event=on_event)
    try:
        if argv[0] == "start":
            states = [await engine.start("Transfer", argv[1], TransferInput(amount=42))]
        else:
            states = await engine.resume_pending()
        for s in states:
            print(f"RESULT {s.saga_id} {s.status.value}", flush=True)
    finally:
        await store.close()
        tracing.shutdown_tracing()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
