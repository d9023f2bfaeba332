"""The pure meaning of each step of the classic driver's sagas.

The sagas themselves are declared as data in :mod:`draflow.services.driver_controller.saga_wiring`
(``SagaDefinition`` s of the engine, ``draflow.sagas.engine``): each step names an action and,
optionally, the compensation that undoes it. The engine registers a step's compensation before
the step starts, retries transient failures and, on a permanent failure, compensates every
started step in reverse order (including the failing one).

What each action means is :func:`run_action`: a pure function of the claim, its class, the plugin
and the saga input, returning :class:`Done` (with the claim as it must be written, or ``None`` for
no write), :class:`Retry` (transient: the engine retries with backoff) or :class:`Fail`
(permanent: compensate).

* **allocation** (``ClassicAllocation``): check the claim is still Pending for the same node (undo:
  record the failure: clear ``selectedNode``, list the node as unsuitable when the failure was
  definite) -> ensure the finalizer (undo: remove it) -> driver allocates and the result is
  written as phase Allocated (undo: driver frees — unless the claim shows a recorded allocation:
  this step never completed, so another saga recorded it, and the plugin's books for the claim's
  uid are that allocation's; ``InProgress`` is a retry; a re-run after a crash gets the same answer
  because plugins are idempotent per claim uid).
* **reallocation** (``ClassicReallocation``): check phase Reallocate and no users (undo: cancel
  the request, phase Allocated again) -> driver frees -> record Pending (freeing again first,
  idempotently: a process resuming the saga after the free rebuilt its plugin's books from the
  log, where the claim was still allocated) -> remove the finalizer.
  The scheduler then sets a new ``selectedNode`` and the allocation saga runs again, elsewhere.
  When the driver cannot free the claim (a definite failure, or transient failures past the
  retries) the saga compensates: the claim is Allocated again and keeps its finalizer, so the
  pod's next attempt decides afresh (it may ask for Reallocate again).
* **teardown** (``ClassicTeardown``): as reallocation, for a deleted claim without users; a failed
  free leaves the claim as it is and ``sync_claim`` starts the saga again later (the claim is
  being deleted: there is nothing to undo).

Freeing itself has no compensation: a released resource cannot be taken back. Every
compensation is idempotent (it looks at the current claim and writes only what is missing), and
the engine records a step's compensation before the step runs.
"""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from draflow.events.api import classic_v1alpha1 as cv
from draflow.services.dra.classic import claims as cl
from draflow.services.dra.classic.plugin import (
    AllocationResult,
    ControllerPlugin,
    Freed,
    InProgress,
    Parameters,
)

__all__ = [
    "Done",
    "Fail",
    "Retry",
    "SagaInput",
    "StepOutcome",
    "run_action",
    "saga_id",
]


# Action names (each saga step and compensation runs one, see ``saga_wiring``).
CHECK_PENDING = "CheckPending"
RECORD_FAILURE = "RecordFailure"
ENSURE_FINALIZER = "EnsureFinalizer"
REMOVE_FINALIZER = "RemoveFinalizer"
DRIVER_ALLOCATE = "DriverAllocate"
DRIVER_DEALLOCATE = "DriverDeallocate"
UNDO_ALLOCATE = "UndoAllocate"  # DriverDeallocate as a compensation: never under a recorded allocation
CHECK_FREEABLE = "CheckFreeable"
RECORD_PENDING = "RecordPending"
CANCEL_REALLOCATION = "CancelReallocation"


class SagaInput(msgspec.Struct, frozen=True, kw_only=True):
    """What a classic saga is started with (JSON-able: it is stored in ``SagaStarted``)."""

    namespace: str
    name: str
    uid: str
    driver_name: str
    selected_node: str | None = None
    reason: str = ""


def saga_id(saga_type: str, claim: cv.ResourceClaim, claim_seq: int, attempt: int = 0) -> str:
    """Deterministic per claim version and attempt: a redelivered decision starts no second saga;
    a saga that failed without changing the claim (a free that did not work) is tried again
    under the next attempt number."""
    suffix = f"-{attempt}" if attempt else ""
    return f"{saga_type}-{claim.metadata.uid or claim.metadata.name}-{claim_seq}{suffix}"[:128]


class Done(msgspec.Struct, frozen=True, kw_only=True):
    """The step succeeded; ``claim`` is the claim to write (None: nothing to write)."""

    claim: cv.ResourceClaim | None = None
    note: str = ""


class Retry(msgspec.Struct, frozen=True, kw_only=True):
    reason: str


class Fail(msgspec.Struct, frozen=True, kw_only=True):
    reason: str
    definite: bool = False


StepOutcome: TypeAlias = Done | Retry | Fail


def _same_claim(claim: cv.ResourceClaim | None, inp: SagaInput) -> str | None:
    if claim is None:
        return "the claim is gone"
    if inp.uid and claim.metadata.uid != inp.uid:
        return "the claim was replaced (different uid)"
    return None


def _free(plugin: ControllerPlugin, claim: cv.ResourceClaim) -> StepOutcome | None:
    """The driver frees the claim: None once it is freed, else a retry or a failure."""
    freed = plugin.deallocate(claim)
    if isinstance(freed, Freed):
        return None
    if isinstance(freed, InProgress):
        return Retry(reason=freed.reason)
    return Fail(reason=freed.reason, definite=True) if freed.definite else Retry(reason=freed.reason)


def run_action(
    action: str,
    claim: cv.ResourceClaim | None,
    resource_class: cv.ResourceClass | None,
    plugin: ControllerPlugin,
    inp: SagaInput,
    *,
    failure: Fail | None = None,
) -> StepOutcome:
    """The pure meaning of one step or compensation on the current claim.

    ``failure`` is the saga's failure, for ``RecordFailure`` (only a definite failure marks the
    selected node unsuitable).
    """
    problem = _same_claim(claim, inp)
    if claim is None or problem is not None:
        # Compensations of a vanished claim have nothing left to write.
        return (
            Done(note=problem or "")
            if action in (RECORD_FAILURE, REMOVE_FINALIZER, CANCEL_REALLOCATION)
            else Fail(reason=problem or "")
        )
    driver = inp.driver_name
    if action == CHECK_PENDING:
        if cl.is_deleting(claim):
            return Fail(reason="the claim is being deleted", definite=True)
        if cl.phase(claim) != cv.PENDING:
            return Fail(reason=f"the claim is {cl.phase(claim)}, not Pending", definite=True)
        selected = cl.scheduling(claim).scheduler.selected_node or None
        if selected != inp.selected_node:
            return Fail(reason=f"the selected node changed to {selected!r}", definite=False)
        return Done()
    if action == RECORD_FAILURE:
        if cl.phase(claim) != cv.PENDING:
            return Done(note="claim no longer pending")
        current = cl.scheduling(claim).scheduler.selected_node
        if current != (inp.selected_node or ""):
            return Done(note="the scheduler selected another node meanwhile: its choice stays")
        node = inp.selected_node if failure is not None and failure.definite else None
        if not current and node is None:
            return Done()
        return Done(claim=cl.allocation_failed_on(claim, node))
    if action == ENSURE_FINALIZER:
        return Done() if cl.has_finalizer(claim, driver) else Done(claim=cl.with_finalizer(claim, driver))
    if action == REMOVE_FINALIZER:
        if not cl.has_finalizer(claim, driver):
            return Done()
        if cl.phase(claim) != cv.PENDING:
            return Done(note="claim still allocated: the finalizer stays")
        return Done(claim=cl.without_finalizer(claim, driver))
    if action == DRIVER_ALLOCATE:
        if resource_class is None:
            return Fail(reason=f"ResourceClass {claim.spec.resource_class_name!r} not found", definite=True)
        params = Parameters(
            class_parameters=resource_class.parameters, claim_parameters=claim.spec.parameters
        )
        out = plugin.allocate(claim, resource_class, params, inp.selected_node)
        if isinstance(out, AllocationResult):
            return Done(claim=cl.allocated(claim, driver, out))
        if isinstance(out, InProgress):
            return Retry(reason=out.reason)
        return Fail(reason=out.reason, definite=True) if out.definite else Retry(reason=out.reason)
    if action == CHECK_FREEABLE:
        if claim.status.reserved_for:
            return Fail(reason="the claim is in use (reservedFor is not empty)")
        if cl.phase(claim) == cv.PENDING:
            return Fail(reason="the claim is not allocated")
        return Done()
    if action == UNDO_ALLOCATE and cl.phase(claim) != cv.PENDING:
        return Done(note=f"the claim is {cl.phase(claim)}: another saga recorded the allocation, it stays")
    if action in (DRIVER_DEALLOCATE, UNDO_ALLOCATE):
        return _free(plugin, claim) or Done()
    if action == RECORD_PENDING:
        # Free first (idempotent; a no-op after DriverDeallocate in this process): a process that
        # resumed the saga after that step rebuilt the plugin's books from the log, where the claim
        # still looked allocated, and would otherwise hold its resources for good.
        return _free(plugin, claim) or Done(claim=cl.deallocated(claim))
    if action == CANCEL_REALLOCATION:
        if cl.phase(claim) != cv.REALLOCATE:
            return Done(note=f"claim is {cl.phase(claim)}: nothing to cancel")
        return Done(claim=cl.reallocation_cancelled(claim))
    raise ValueError(f"unknown classic saga action {action!r}")
