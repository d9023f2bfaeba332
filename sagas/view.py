"""What ``draflow get sagas`` / ``describe saga`` show: a saga's history folded per step. Pure.

The saga's state (``Running`` ... ``CompensationFailed``) and next move come from
``draflow.sagas.state`` (the same fold the engine decides with); this adds what an operator asks about and
the engine does not need: each step's outcome, attempts, last error, the compensations and when
things happened.

Attempts: the engine retries transient failures inside one ``SagaStepStarted``, and records the
attempt count only when a step gives up (``SagaStepFailed.attempts``). So a step's attempts are
the larger of that count and the number of times the step was started (a step resumed after a
crash starts again).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

import msgspec

from draflow.events.envelope import Envelope, Event
from draflow.events.saga import (
    SagaCompensationFailed,
    SagaCompleted,
    SagaStarted,
    SagaStepCompensated,
    SagaStepCompleted,
    SagaStepFailed,
    SagaStepStarted,
)
from draflow.sagas.state import SagaState, apply, decide

_STEP_EVENTS = (
    SagaStepStarted,
    SagaStepCompleted,
    SagaStepFailed,
    SagaStepCompensated,
    SagaCompensationFailed,
)

__all__ = ["SagaView", "StepView", "current_step", "fold_view"]


class StepView(msgspec.Struct, kw_only=True):
    index: int
    name: str
    state: str = "Pending"  # the step's own outcome: Pending, Running, Completed, Failed
    attempts: int = 0
    error: str = ""
    compensation: str = ""  # the compensation's name ("" when the step has none)
    compensation_state: str = ""  # "", Compensated, Failed
    started: datetime.datetime | None = None
    finished: datetime.datetime | None = None
    compensated: datetime.datetime | None = None


class SagaView(msgspec.Struct, kw_only=True):
    state: SagaState
    steps: list[StepView]
    created: datetime.datetime
    updated: datetime.datetime
    events: int = 0


def fold_view(envs: Iterable[Envelope[Event]]) -> SagaView | None:
    """One saga's events, in order -> its view (None without ``SagaStarted``)."""
    view: SagaView | None = None
    for env in envs:
        state = apply(None if view is None else view.state, env)
        if state is None:
            continue
        if view is None or isinstance(env.data, SagaStarted):
            view = SagaView(
                state=state,
                steps=[
                    StepView(index=i, name=n, compensation=state.implied.get(i, ""))
                    for i, n in enumerate(state.steps)
                ],
                created=env.time,
                updated=env.time,
            )
        view.state, view.updated = state, env.time
        view.events += 1
        d = env.data
        # steps that log no events of their own (local, see draflow.events.saga): done once the
        # saga got past them
        past = len(view.steps) if isinstance(d, SagaCompleted) else getattr(d, "index", -1)
        for step in view.steps[: max(past, 0)]:
            if step.state == "Pending":  # finished by the time of the event that shows it
                step.state, step.finished = "Completed", env.time
        if isinstance(
            d,
            SagaStepStarted
            | SagaStepCompleted
            | SagaStepFailed
            | SagaStepCompensated
            | SagaCompensationFailed,
        ) and 0 <= d.index < len(view.steps):
            step = view.steps[d.index]
            if isinstance(d, SagaStepStarted):
                step.state, step.attempts, step.compensation = "Running", step.attempts + 1, d.compensation
                step.started = step.started or env.time
            elif isinstance(d, SagaStepCompleted):
                step.state, step.finished = "Completed", env.time
            elif isinstance(d, SagaStepFailed):
                step.state, step.finished, step.error = "Failed", env.time, d.error
                step.attempts = max(step.attempts, d.attempts)
            elif isinstance(d, SagaStepCompensated):
                step.compensation_state, step.compensated = "Compensated", env.time
            else:
                step.compensation_state, step.compensated = "Failed", env.time
                step.error = f"compensating: {d.error}"
    return view


def current_step(view: SagaView) -> StepView | None:
    """The step the saga is at: the next to run or compensate, else the one it ended on (the step
    whose compensation failed, or the one that failed, or the last one)."""
    action = decide(view.state)
    if action.index >= 0:
        return view.steps[action.index]
    touched = [s for s in view.steps if s.state != "Pending"]
    if view.state.status == "Completed" or not touched:
        return touched[-1] if touched else None
    stuck = [s for s in touched if s.compensation_state == "Failed"]  # where an operator must act
    failed = [s for s in touched if s.state == "Failed"]
    return (stuck or failed or touched)[-1]
