"""The classic driver's sagas, declared as data: allocation, reallocation and teardown.

Each is an engine ``SagaDefinition`` whose steps and compensations are :class:`ClaimStep` s, one
action each (``services.driver_controller.sagas``: the pure meaning of every action). The engine
is given :class:`ClassicSagaDeps` (the service's plugins and a :class:`ClaimStore`: load a claim
with its aggregate sequence, load a class, write a changed claim as its domain events with
optimistic concurrency through the step context); every step loads the current claim, asks
:func:`~services.driver_controller.sagas.run_action` what it means and writes the answer.
``Retry`` and write conflicts become ``TransientError`` (the engine retries with backoff,
re-reading the claim); ``Fail`` becomes a ``PermanentError`` (the engine compensates). A definite
allocation failure is recorded on the claim before failing (``selectedNode`` cleared, the node
listed unsuitable), because compensations do not see why the saga failed.

* **allocation** (``ClassicAllocation``): check-claim (undo: record the failure) -> set-finalizer
  (undo: remove it) -> allocate-and-record (undo: the driver frees, see ``UndoAllocate``);
* **reallocation** (``ClassicReallocation``): check-claim (undo: cancel the reallocation) ->
  driver-deallocate -> record-pending -> remove-finalizer;
* **teardown** (``ClassicTeardown``): as reallocation, nothing to undo.

Every claim a step would write is first checked as the apiserver's status verb would check it
(:func:`write_problems`, ``validate_classic(new, old)``, as the scheduler's writes are): an
invalid write is not appended, it is logged and becomes a definite failure of the step (``Fail``,
so the engine compensates; for the allocation step the node is recorded as unsuitable, as for a
definite driver failure).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

from events.api import classic_v1alpha1 as cv
from infra.errors import ConcurrencyError, PermanentError, TransientError
from sagas.engine import SagaDefinition, Step, StepContext
from services.dra.classic.plugin import ControllerPlugin
from services.dra.classic.validation import validate_classic
from services.driver_controller.controller import DEALLOCATE_DELETED, StartAllocation, StartDeallocation
from services.driver_controller.sagas import (
    CANCEL_REALLOCATION,
    CHECK_FREEABLE,
    CHECK_PENDING,
    DRIVER_ALLOCATE,
    DRIVER_DEALLOCATE,
    ENSURE_FINALIZER,
    RECORD_FAILURE,
    RECORD_PENDING,
    REMOVE_FINALIZER,
    UNDO_ALLOCATE,
    Done,
    Fail,
    Retry,
    SagaInput,
    run_action,
)

__all__ = [
    "ALLOCATION",
    "REALLOCATION",
    "SAGAS",
    "TEARDOWN",
    "ClaimStep",
    "ClaimStore",
    "ClassicSagaDeps",
    "plan_for",
    "write_problems",
]

log = logging.getLogger(__name__)


class ClaimStore(Protocol):
    async def load(self, namespace: str, name: str) -> tuple[cv.ResourceClaim | None, int]:
        """The claim and the stream sequence of its aggregate's last event (0: none)."""
        ...

    async def load_class(self, name: str) -> cv.ResourceClass | None: ...

    async def write(self, ctx: StepContext, old: cv.ResourceClaim, new: cv.ResourceClaim, seq: int) -> None:
        """Append the events turning ``old`` into ``new`` (``ctx.append``, expected_last_seq=seq);
        raises ``ConcurrencyError`` when the claim moved on."""
        ...


def write_problems(old: cv.ResourceClaim, new: cv.ResourceClaim) -> str:
    """Why the apiserver would refuse ``new`` as an update of ``old`` ("" when it is valid)."""
    return "; ".join(str(e) for e in validate_classic(new, old))


def _refused(ctx: StepContext[Any, Any], action: str, claim: cv.ResourceClaim, problems: str) -> str:
    what = "compensation" if ctx.compensating else "step"
    meta = claim.metadata
    log.error(
        "saga %s: %s %s would write an invalid claim %s/%s, not appended: %s",
        ctx.saga_id,
        what,
        action,
        meta.namespace,
        meta.name,
        problems,
    )
    return f"invalid claim write refused: {problems}"


class ClassicSagaDeps(NamedTuple):
    """What the classic sagas' steps need from the driver controller (``StepContext.deps``)."""

    plugins: Mapping[str, ControllerPlugin]
    store: ClaimStore


class ClaimStep:
    """One step or compensation of a classic saga: ``run_action(action)`` on the current claim."""

    __slots__ = ("action",)

    def __init__(self, action: str) -> None:
        self.action = action

    def __repr__(self) -> str:
        return f"ClaimStep({self.action!r})"

    async def __call__(self, ctx: StepContext[SagaInput, ClassicSagaDeps]) -> dict[str, Any] | None:
        action, inp = self.action, ctx.input
        plugins, store = ctx.deps.plugins, ctx.deps.store
        plugin = plugins.get(inp.driver_name)
        if plugin is None:
            raise PermanentError(f"no classic driver plugin {inp.driver_name!r} in this service")
        claim, seq = await store.load(inp.namespace, inp.name)
        cls = await store.load_class(claim.spec.resource_class_name) if claim is not None else None
        out = run_action(action, claim, cls, plugin, inp)
        if isinstance(out, Done) and out.claim is not None and claim is not None:
            problems = write_problems(claim, out.claim)
            if problems:  # a definite failure of this step: the engine compensates
                out = Fail(reason=_refused(ctx, action, claim, problems), definite=True)
        try:
            if isinstance(out, Retry):
                raise TransientError(out.reason)
            if isinstance(out, Fail):
                if out.definite and action == DRIVER_ALLOCATE and claim is not None:
                    rec = run_action(RECORD_FAILURE, claim, cls, plugin, inp, failure=out)
                    if isinstance(rec, Done) and rec.claim is not None:
                        problems = write_problems(claim, rec.claim)
                        if problems:
                            _refused(ctx, RECORD_FAILURE, claim, problems)
                        else:
                            await store.write(ctx, claim, rec.claim, seq)
                raise PermanentError(out.reason)
            if out.claim is not None and claim is not None:
                await store.write(ctx, claim, out.claim, seq)
        except ConcurrencyError as exc:
            raise TransientError(str(exc)) from exc
        return {"note": out.note} if isinstance(out, Done) and out.note else None


ALLOCATION = SagaDefinition(
    "ClassicAllocation",
    (
        Step("check-claim", ClaimStep(CHECK_PENDING), ClaimStep(RECORD_FAILURE)),
        Step("set-finalizer", ClaimStep(ENSURE_FINALIZER), ClaimStep(REMOVE_FINALIZER)),
        Step("allocate-and-record", ClaimStep(DRIVER_ALLOCATE), ClaimStep(UNDO_ALLOCATE)),
    ),
    SagaInput,
)
_FREE_STEPS = (
    Step("driver-deallocate", ClaimStep(DRIVER_DEALLOCATE)),
    Step("record-pending", ClaimStep(RECORD_PENDING)),
    Step("remove-finalizer", ClaimStep(REMOVE_FINALIZER)),
)
REALLOCATION = SagaDefinition(
    "ClassicReallocation",
    (Step("check-claim", ClaimStep(CHECK_FREEABLE), ClaimStep(CANCEL_REALLOCATION)), *_FREE_STEPS),
    SagaInput,
)
TEARDOWN = SagaDefinition(
    "ClassicTeardown", (Step("check-claim", ClaimStep(CHECK_FREEABLE)), *_FREE_STEPS), SagaInput
)
SAGAS = (ALLOCATION, REALLOCATION, TEARDOWN)


def plan_for(action: StartAllocation | StartDeallocation) -> SagaDefinition:
    """The saga that carries out a ``sync_claim`` decision."""
    if isinstance(action, StartAllocation):
        return ALLOCATION
    return TEARDOWN if action.reason == DEALLOCATE_DELETED else REALLOCATION
