"""Sagas: pure state and decisions, retries and compensation, and resuming after SIGKILL."""

from __future__ import annotations

import datetime
from typing import Any

import msgspec
import pytest

from events.envelope import Envelope, Event
from events.saga import SagaStarted, SagaStepCompleted, SagaStepFailed, SagaStepStarted
from infra.config import Settings
from infra.errors import TransientError
from infra.eventstore import EventStore
from sagas.engine import SagaDefinition, SagaEngine, Step, StepContext
from sagas.state import Action, SagaStatus, apply, decide
from tests.foundation.procs import SAGA_WORKER, Worker
from tests.foundation.saga_worker import effect_subject


def _env(seq: int, event: Event, subject: str = "draflow.ev.Saga._.s1") -> Envelope[Event]:
    return Envelope(
        id=f"e{seq}",
        type=type(event).type_name(),
        schema=1,
        subject=subject,
        time=datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC),
        data=event,
        seq=seq,
    )


def test_decisions_are_a_pure_function_of_the_events() -> None:
    s = apply(None, _env(1, SagaStarted(saga_type="T", steps=["a", "b"])))
    assert s is not None and decide(s) == Action("run", 0, "a")
    s = apply(s, _env(2, SagaStepStarted(step="a", index=0, compensation="a:compensate")))
    assert s is not None and decide(s) == Action("run", 0, "a")  # started, not completed: run again
    s = apply(s, _env(3, SagaStepCompleted(step="a", index=0, output={"x": 1})))
    assert s is not None and decide(s) == Action("run", 1, "b")
    s = apply(s, _env(4, SagaStepStarted(step="b", index=1, compensation="")))
    s = apply(s, _env(5, SagaStepFailed(step="b", index=1, error="no")))
    assert s is not None and s.status == SagaStatus.COMPENSATING and s.version == 5
    # b has no compensation; a's registered compensation is owed
    assert decide(s) == Action("compensate", 0, "a")


def _engine_steps(log: list[str], fail: dict[str, int], permanent: set[str]) -> SagaDefinition:
    def action(name: str) -> Any:
        async def run(ctx: StepContext) -> dict[str, Any]:
            log.append(f"do {name}#{ctx.attempt}")
            if fail.get(name, 0) > 0:
                fail[name] -= 1
                raise TransientError(f"{name} busy")
            if name in permanent:
                raise ValueError(f"{name} impossible")
            return {"done": name}

        return run

    def undo(name: str) -> Any:
        async def run(ctx: StepContext) -> None:
            log.append(f"undo {name}")

        return run

    return SagaDefinition("T", tuple(Step(n, action(n), undo(n)) for n in ("a", "b", "c")))


async def test_transient_failures_are_retried(event_store: EventStore) -> None:
    log: list[str] = []
    engine = SagaEngine(event_store, [_engine_steps(log, {"b": 2}, set())], retry_initial_s=0.01)
    state = await engine.start("T", "s-retry")
    assert state.status == SagaStatus.COMPLETED
    assert log == ["do a#1", "do b#1", "do b#2", "do b#3", "do c#1"]
    assert state.outputs == {"a": {"done": "a"}, "b": {"done": "b"}, "c": {"done": "c"}}
    # the saga's own history, event-sourced on its subject
    types = [e.type for e in await event_store.events(engine.subject("s-retry"))]
    assert types == ["SagaStarted"] + ["SagaStepStarted", "SagaStepCompleted"] * 3 + ["SagaCompleted"]
    assert await engine.start("T", "s-retry") == state  # starting again is a no-op: it is done


async def test_failure_compensates_in_reverse(event_store: EventStore) -> None:
    log: list[str] = []
    engine = SagaEngine(
        event_store, [_engine_steps(log, {"c": 99}, set())], retry_attempts=3, retry_initial_s=0.01
    )
    state = await engine.start("T", "s-comp")
    assert state.status == SagaStatus.COMPENSATED
    assert log == ["do a#1", "do b#1", "do c#1", "do c#2", "do c#3", "undo c", "undo b", "undo a"]
    assert state.error.startswith("c: gave up after 3 attempts: TransientError: c busy")
    log.clear()
    permanent = SagaEngine(event_store, [_engine_steps(log, {}, {"b"})])
    assert (await permanent.start("T", "s-perm")).status == SagaStatus.COMPENSATED
    assert log == ["do a#1", "do b#1", "undo b", "undo a"]  # no retry for a permanent failure


async def test_failed_compensation_is_terminal(event_store: EventStore) -> None:
    async def ok(ctx: StepContext) -> None:
        return None

    async def boom(ctx: StepContext) -> None:
        raise RuntimeError("cannot undo")

    async def fail(ctx: StepContext) -> None:
        raise ValueError("no")

    engine = SagaEngine(event_store, [SagaDefinition("U", (Step("a", ok, boom), Step("b", fail)))])
    state = await engine.start("U", "s-cf")
    assert state.status == SagaStatus.COMPENSATION_FAILED
    assert "cannot undo" in state.error and "b: ValueError: no" in state.error


# ---- crash tests: a real process killed with SIGKILL, a fresh one resumes ------------------------


async def effects(store: EventStore, saga_id: str) -> dict[str, list[str]]:
    return {
        step: [e.type for e in await store.events(effect_subject(store, saga_id, step))]
        for step in ("reserve", "charge", "ship")
    }


@pytest.mark.parametrize(
    ("saga_id", "env", "paused", "final", "expected"),
    [
        (  # killed between two steps: resumed forward
            "between",
            {"PAUSE_AFTER": "reserve"},
            "PAUSED after reserve",
            "Completed",
            {"reserve": ["EffectApplied"], "charge": ["EffectApplied"], "ship": ["EffectApplied"]},
        ),
        (  # killed after a step's effect, before its completion was recorded: re-run, no 2nd effect
            "midstep",
            {"PAUSE_IN": "charge"},
            "PAUSED in charge",
            "Completed",
            {"reserve": ["EffectApplied"], "charge": ["EffectApplied"], "ship": ["EffectApplied"]},
        ),
        (  # killed between two compensations: resumed backward
            "undoing",
            {"FAIL_AT": "ship", "PAUSE_AFTER_UNDO": "charge"},
            "PAUSED after undo charge",
            "Compensated",
            {
                "reserve": ["EffectApplied", "EffectReverted"],
                "charge": ["EffectApplied", "EffectReverted"],
                "ship": [],
            },
        ),
    ],
)
async def test_saga_resumes_after_sigkill(
    event_store: EventStore,
    settings: Settings,
    saga_id: str,
    env: dict[str, str],
    paused: str,
    final: str,
    expected: dict[str, list[str]],
) -> None:
    first = Worker(settings, SAGA_WORKER, ["start", saga_id], env)
    first.expect(paused)
    first.kill()
    engine = SagaEngine(event_store, [])
    interrupted = await engine.load(saga_id)
    assert interrupted is not None and not interrupted.status.terminal
    second = Worker(settings, SAGA_WORKER, ["resume"])
    assert second.expect("RESULT") == f"RESULT {saga_id} {final}"
    assert second.finish() == 0
    assert await effects(event_store, saga_id) == expected
    done = await engine.load(saga_id)
    assert done is not None and done.status.value == final


class Order(msgspec.Struct, frozen=True, kw_only=True):
    item: str
    count: int = 1


class Shop:
    """What the order saga's steps need from the service running it (``StepContext.deps``)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Order]] = []


async def _take(ctx: StepContext[Order, Shop]) -> dict[str, Any]:
    ctx.deps.seen.append((ctx.saga_id, ctx.input))
    return {"taken": ctx.input.count}


ORDER = SagaDefinition("Order", (Step("take", _take),), Order)


async def test_saga_input_is_a_typed_struct_and_deps_come_from_the_engine(event_store: EventStore) -> None:
    shop = Shop()
    engine = SagaEngine(event_store, [ORDER], deps=shop)
    state = await engine.start("Order", "o-1", Order(item="gpu", count=2))
    assert state.status is SagaStatus.COMPLETED and shop.seen == [("o-1", Order(item="gpu", count=2))]
    # stored as the Struct's JSON form, as before inputs were typed
    assert state.input == {"item": "gpu", "count": 2}
    with pytest.raises(TypeError, match="input must be Order"):
        await engine.start("Order", "o-2", {"item": "gpu"})  # type: ignore[arg-type]


async def test_a_saga_recorded_with_a_dict_input_resumes_with_the_struct(event_store: EventStore) -> None:
    """Old logs: ``SagaStarted.input`` was written as a dict by callers (``to_builtins`` of the
    input Struct); a resumed saga decodes it into the definition's input type."""
    subject = SagaEngine(event_store, [ORDER]).subject("o-old")
    started = SagaStarted(saga_type="Order", input={"item": "fpga"}, steps=["take"])
    await event_store.append(subject, started, expected_last_seq=0, msg_id="old-started")
    shop = Shop()
    (state,) = await SagaEngine(event_store, [ORDER], deps=shop).resume_pending()
    assert state.status is SagaStatus.COMPLETED and shop.seen == [("o-old", Order(item="fpga", count=1))]
