"""Every projection draflow defines, by name: what ``draflow replay`` / ``draflow rebuild`` build.

* ``heads`` — every aggregate's version and last event (:mod:`projections.heads`);
* ``sagas`` — every saga's state, folded with the engine's own reducer (:mod:`sagas.state`);
* ``objects_<kind>`` — one per served kind (and ``objects_event`` for Kubernetes Events): the API
  objects exactly as the apiserver folds them (:func:`projections.objects.object_projection`,
  with the DRA and node reducers loaded).
"""

from __future__ import annotations

from typing import Any

import msgspec

from events.envelope import Envelope, Event
from events.objects import EVENT_KIND
from projections.base import Projection
from projections.heads import Heads
from projections.objects import object_projection
from sagas.state import SagaState
from sagas.state import apply as saga_apply

__all__ = ["SagaRow", "SagaStates", "all_projections", "projection_names"]


class SagaRow(SagaState, frozen=True, kw_only=True):
    """A saga's state as a row: ``SagaState`` with the compensation map keyed by the step index as
    text (JSON object keys), so it persists with a deterministic key order."""

    compensations: dict[str, str] = {}  # type: ignore[assignment]


def _to_row(state: SagaState) -> SagaRow:
    fields = msgspec.structs.asdict(state)
    fields["compensations"] = {str(k): v for k, v in state.compensations.items()}
    return SagaRow(**fields)


def _from_row(row: SagaRow) -> SagaState:
    fields = msgspec.structs.asdict(row)
    fields["compensations"] = {int(k): v for k, v in row.compensations.items()}
    return SagaState(**fields)


class SagaStates(Projection[SagaRow]):
    name = "sagas"
    state_type = SagaRow
    subjects = ("Saga._.*",)

    def apply(self, key: str, state: SagaRow | None, env: Envelope[Event]) -> SagaRow | None:
        new = saga_apply(None if state is None else _from_row(state), env)
        return None if new is None else _to_row(new)


def all_projections(root: str = "draflow") -> list[Projection[Any]]:
    from events.api.registry import resource_types

    kinds = sorted({rt.kind for rt in resource_types()} | {EVENT_KIND})
    return [Heads(root), SagaStates(), *(object_projection(k) for k in kinds)]


def projection_names(root: str = "draflow") -> list[str]:
    return [p.name for p in all_projections(root)]
