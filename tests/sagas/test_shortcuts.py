"""The saga engine's shortcuts: local steps, implied starts, a completion in its effect's batch."""

from __future__ import annotations

import datetime
from typing import Any

import msgspec
import pytest

from draflow.events.envelope import Envelope, Event
from draflow.events.saga import SagaStarted, SagaStepCompleted, SagaStepFailed
from draflow.infra.eventstore import EventStore
from draflow.sagas.engine import SagaDefinition, SagaEngine, SagaMoved, Step, StepContext
from draflow.sagas.state import Action, SagaStatus, apply, decide
from tests.widgets import WidgetResized

SUBJECT = "draflow.ev.Saga._.s1"


def _env(seq: int, event: Event) -> Envelope[Event]:
    return Envelope(
        id=f"e{seq}",
        type=type(event).type_name(),
        schema=1,
        subject=SUBJECT,
        time=datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC),
        data=event,
        seq=seq,
    )


def test_an_implied_start_is_owed_once_the_saga_reaches_the_step() -> None:
    started = SagaStarted(saga_type="T", steps=["a", "b", "c"], implied_starts={0: "a:undo", 1: "b:undo"})
    s = apply(None, _env(1, started))
    assert s is not None and s.started == () and decide(s) == Action("run", 0, "a")
    s = apply(s, _env(2, SagaStepCompleted(step="a", index=0)))
    assert s is not None and s.started == (0,)  # reached: a's compensation is owed
    s = apply(s, _env(3, SagaStepFailed(step="c", index=2, error="no")))
    # b never recorded anything, yet the saga got past it: its compensation is owed too
    assert s is not None and s.started == (0, 1) and decide(s) == Action("compensate", 1, "b")


def test_a_saga_recorded_before_the_shortcuts_folds_as_it_did() -> None:
    s = apply(None, _env(1, SagaStarted(saga_type="T", steps=["a", "b"])))
    s = apply(s, _env(2, SagaStepFailed(step="a", index=0, error="no")))
    assert s is not None and s.started == () and decide(s) == Action("compensated")


def _definition(log: list[str], *, fail: str = "") -> SagaDefinition:
    async def local(ctx: StepContext[Any, Any]) -> dict[str, Any]:
        log.append("local")
        return {"in": "memory"}

    async def write(ctx: StepContext[Any, Any]) -> dict[str, Any]:
        log.append(f"write {ctx.step}")
        if ctx.step == fail:
            raise ValueError("refused")
        out = {"wrote": ctx.step}
        subject = ctx.store.subject("Widget", "ns", "w")
        # "first" writes two events (an atomic batch: its completion rides along), "last" one
        events = [WidgetResized(size=i) for i in range(2 if ctx.step == "first" else 1)]
        await ctx.append(subject, events, expected_last_seq=None, complete=out)
        return out

    async def undo(ctx: StepContext[Any, Any]) -> None:
        log.append(f"undo {ctx.step}")

    return SagaDefinition(
        "S",
        (
            Step("reserve", local, undo, local=True),
            Step("first", write, undo, logs_start=False),
            Step("last", write, logs_start=False),
        ),
    )


async def test_the_happy_path_records_four_saga_events(event_store: EventStore) -> None:
    log: list[str] = []
    engine = SagaEngine(event_store, [_definition(log)])
    state = await engine.start("S", "s-short")
    assert state.status is SagaStatus.COMPLETED and log == ["local", "write first", "write last"]
    saga = await event_store.events(engine.subject("s-short"))
    assert [e.type for e in saga] == [
        "SagaStarted",
        "SagaStepCompleted",
        "SagaStepCompleted",
        "SagaCompleted",
    ]
    widget = await event_store.events(event_store.subject("Widget", "ns", "w"))
    # the first step's completion is stored right after its effect, in the effect's atomic
    # batch; the last step's single event is no batch: its completion is appended after it
    assert saga[1].seq == widget[1].seq + 1 and saga[2].seq > widget[2].seq
    assert state.version == saga[-1].seq
    # the local step's completion was this process's memory only
    assert state.outputs["reserve"] == {"in": "memory"}
    stored = msgspec.structs.replace(
        state, outputs={k: v for k, v in state.outputs.items() if k != "reserve"}
    )
    assert (await engine.load("s-short")) == stored
    # starting it again finds its own messages in the log (deterministic ids): nothing new lands
    assert await engine.start("S", "s-short") == stored
    assert len(await event_store.events(event_store.subject("Widget", "ns", "w"))) == 3


async def test_a_failure_compensates_the_implied_and_local_steps(event_store: EventStore) -> None:
    log: list[str] = []
    engine = SagaEngine(event_store, [_definition(log, fail="last")])
    state = await engine.start("S", "s-fail")
    assert state.status is SagaStatus.COMPENSATED
    assert log == ["local", "write first", "write last", "undo first", "undo reserve"]
    types = [e.type for e in await event_store.events(engine.subject("s-fail"))]
    assert types == [
        "SagaStarted",
        "SagaStepCompleted",
        "SagaStepFailed",
        "SagaStepCompensated",
        "SagaStepCompensated",
        "SagaCompensated",
    ]


async def test_a_step_batch_refused_because_the_saga_moved_on_is_decided_again(
    event_store: EventStore,
) -> None:
    """Another process drove the saga meanwhile: the batch carrying a step's effect and its
    completion expects the saga's old version, so none of it lands; the engine reloads."""
    log: list[str] = []
    engine = SagaEngine(event_store, [_definition(log)])
    done = await engine.start("S", "s-moved")
    events = await event_store.events(engine.subject("s-moved"))
    stale = apply(None, events[0])  # SagaStarted only: "first" still owed, as this process sees it
    assert stale is not None and stale.outputs == {}
    log.clear()
    other = SagaEngine(event_store, [_definition(log)])
    definition = other.definitions["S"]
    state = await other._drive(definition, "s-moved", stale, definition.decode_input({}))
    assert log == ["local", "write first"]  # the local step is redone; the batch did not land
    assert state.status is SagaStatus.COMPLETED and state.version == done.version
    widget = await event_store.events(event_store.subject("Widget", "ns", "w"))
    assert len(widget) == 3
    with pytest.raises(SagaMoved):
        raise SagaMoved("s")
