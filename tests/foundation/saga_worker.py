"""A process that runs one kind of saga, for the crash tests (``python -m tests.foundation.saga_worker``).

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

from events.envelope import Event
from events.saga import SagaStepCompensated, SagaStepCompleted
from events.union import register_events
from infra import tracing
from infra.config import Settings
from infra.errors import ConcurrencyError, PermanentError
from infra.eventstore import EventStore
from sagas.engine import SagaDefinition, SagaEngine, SagaState, Step, StepContext


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
