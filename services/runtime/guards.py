"""Guard messages for claim writes: the takes of an allocation.

The keys are DRA's (:mod:`draflow.services.dra.guards`), the mechanism is the event store's
(:mod:`draflow.infra.guard`). A deallocation writes no guard message: a take counts as given back
once the scheduler's snapshot has seen its claim allocated (and so, later, freed) or gone
(:mod:`draflow.services.scheduler.service.guard_heads`), so ``ClaimDeallocated`` is a single append
wherever it is written (claim controller, kubelets through the apiserver, the scheduler's sagas).
"""

from __future__ import annotations

from collections.abc import Iterable

from draflow.infra.guard import Guard, guard_subject, take

__all__ = ["take_guards"]


def take_guards(root: str, holder: str, uid: str, seen: Iterable[tuple[str, str, int]]) -> list[Guard]:
    """The takes of an allocation: per (scope, key, the guard's last sequence the decision saw)."""
    return [take(guard_subject(root, scope, key), seq, holder, uid) for scope, key, seq in seen]
