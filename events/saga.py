"""Saga events: a saga's state is itself event-sourced on ``<root>.ev.Saga._.<saga id>``.

The order on the subject is the saga's history: started, then per step "started" (which registers
the step's compensation before it runs), "completed" or "failed"; on failure each started step is
compensated in reverse; one terminal event closes it (completed, compensated, compensation failed).

Two shortcuts keep the critical path short (both recorded in ``SagaStarted``, so old logs fold as
they did): a step whose effect shows it ran records no "started" (its compensation, registered in
``SagaStarted.implied_starts``, is owed from the moment the saga reaches it), and a step whose
effect lives in the memory of the process that runs it, or whose writes a re-run finds in place,
records neither "started" nor "completed" (``SagaStarted.local_steps``; it runs again in
whichever process drives the saga). A step's
"completed" (and the saga's "completed", after its last step) may land in the same atomic batch
as the step's effect on another aggregate.
"""

from __future__ import annotations

from typing import Any

from draflow.events.envelope import Event

__all__ = [
    "TERMINAL_SAGA_EVENTS",
    "SagaCompensated",
    "SagaCompensationFailed",
    "SagaCompleted",
    "SagaStarted",
    "SagaStepCompensated",
    "SagaStepCompleted",
    "SagaStepFailed",
    "SagaStepStarted",
]


class SagaStarted(Event, frozen=True, kw_only=True):
    saga_type: str
    input: dict[str, Any] = {}
    steps: list[str] = []
    # the log position the decision behind the saga was taken on (0: not recorded); what
    # ``draflow verify-replay`` re-decides from
    decided_at_seq: int = 0
    # step index -> compensation name ("" when none) of the steps that record no SagaStepStarted
    implied_starts: dict[int, str] = {}
    # indexes of the steps whose start and completion are not logged (redone on resume)
    local_steps: list[int] = []


class SagaStepStarted(Event, frozen=True, kw_only=True):
    """Written before the step runs: from now on its compensation is owed if the saga fails."""

    step: str
    index: int
    compensation: str = ""  # the compensation's name, "" when the step has none


class SagaStepCompleted(Event, frozen=True, kw_only=True):
    step: str
    index: int
    output: dict[str, Any] = {}


class SagaStepFailed(Event, frozen=True, kw_only=True):
    step: str
    index: int
    error: str
    attempts: int = 1


class SagaStepCompensated(Event, frozen=True, kw_only=True):
    step: str
    index: int


class SagaCompleted(Event, frozen=True, kw_only=True):
    pass


class SagaCompensated(Event, frozen=True, kw_only=True):
    pass


class SagaCompensationFailed(Event, frozen=True, kw_only=True):
    step: str
    index: int
    error: str


TERMINAL_SAGA_EVENTS = frozenset({"SagaCompleted", "SagaCompensated", "SagaCompensationFailed"})
