"""``draflow.sagas.view``: per-step details folded from saga events, pure (no I/O)."""

from __future__ import annotations

import datetime

from draflow.events.envelope import Envelope, Event
from draflow.events.saga import (
    SagaCompensated,
    SagaCompleted,
    SagaStarted,
    SagaStepCompensated,
    SagaStepCompleted,
    SagaStepFailed,
    SagaStepStarted,
)
from draflow.sagas.view import current_step, fold_view

T0 = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)


def _envs(*events: Event) -> list[Envelope[Event]]:
    return [
        Envelope(
            id=f"e{i}",
            type=type(ev).type_name(),
            schema=1,
            subject="draflow.ev.Saga._.s1",
            time=T0 + datetime.timedelta(seconds=i),
            data=ev,
            seq=i,
        )
        for i, ev in enumerate(events, start=1)
    ]


def test_a_resumed_step_counts_again_and_a_failure_reports_its_attempts() -> None:
    envs = _envs(
        SagaStarted(saga_type="T", steps=["a", "b"]),
        SagaStepStarted(step="a", index=0, compensation="a:undo"),
        SagaStepStarted(step="a", index=0, compensation="a:undo"),  # resumed after a crash
        SagaStepCompleted(step="a", index=0),
        SagaStepStarted(step="b", index=1),
        SagaStepFailed(step="b", index=1, error="gave up", attempts=4),
        SagaStepCompensated(step="a", index=0),
        SagaCompensated(),
    )
    view = fold_view(envs[:3])
    assert view is not None and view.state.status == "Running"
    step = current_step(view)
    assert step is not None and (step.name, step.state, step.attempts) == ("a", "Running", 2)
    assert view.updated == T0 + datetime.timedelta(seconds=3) and view.events == 3

    view = fold_view(envs)
    assert view is not None and view.state.status == "Compensated"
    a, b = view.steps
    assert (a.state, a.compensation_state, a.attempts) == ("Completed", "Compensated", 2)
    assert (b.state, b.attempts, b.error, b.compensation) == ("Failed", 4, "gave up", "")
    assert current_step(view) is b
    assert fold_view(envs[1:]) is None  # no SagaStarted: nothing to show


def test_steps_without_events_of_their_own_show_as_done_once_the_saga_is_past_them() -> None:
    started = SagaStarted(
        saga_type="T",
        steps=["a", "b", "c"],
        implied_starts={0: "a:undo", 1: "b:undo", 2: ""},
        local_steps=[0, 1, 2],
    )
    view = fold_view(_envs(started))
    assert view is not None and [s.state for s in view.steps] == ["Pending"] * 3
    assert [s.compensation for s in view.steps] == ["a:undo", "b:undo", ""]
    done = fold_view(_envs(started, SagaCompleted()))
    assert done is not None and [s.state for s in done.steps] == ["Completed"] * 3
    failed = fold_view(_envs(started, SagaStepFailed(step="b", index=1, error="no")))
    assert failed is not None and [s.state for s in failed.steps] == ["Completed", "Failed", "Pending"]
    assert failed.state.started == (0, 1)  # a's and b's compensations are owed
