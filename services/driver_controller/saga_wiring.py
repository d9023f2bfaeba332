"""Turns the classic saga plans into the foundation engine's ``SagaDefinition``s.

The service provides a :class:`ClaimStore` (load a claim with its aggregate sequence, load a class,
write a changed claim as its domain events with optimistic concurrency through the step context);
every step loads the current claim, asks :func:`~services.driver_controller.sagas.run_action`
what it means and writes the answer. ``Retry`` and write conflicts become ``TransientError``
(the engine retries with backoff, re-reading the claim); ``Fail`` becomes a ``PermanentError``
(the engine compensates). A definite allocation failure is recorded on the claim before failing
(``selectedNode`` cleared, the node listed unsuitable), because compensations do not see why the
saga failed.

Every claim a step would write is first checked as the apiserver's status verb would check it
(:func:`write_problems`, ``validate_classic(new, old)``, as the scheduler's writes are): an
invalid write is not appended, it is logged and becomes a definite failure of the step (``Fail``,
so the engine compensates; for the allocation step the node is recorded as unsuitable, as for a
definite driver failure).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from events.api import classic_v1alpha1 as cv
from infra.errors import ConcurrencyError, PermanentError, TransientError
from sagas.engine import SagaDefinition, Step, StepContext
from services.dra.classic.plugin import ControllerPlugin
from services.dra.classic.validation import validate_classic
from services.driver_controller.sagas import (
    DRIVER_ALLOCATE,
    PLANS,
    RECORD_FAILURE,
    Done,
    Fail,
    Retry,
    SagaInput,
    SagaPlan,
    run_action,
)

__all__ = ["ClaimStore", "build_definitions", "write_problems"]

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


def _refused(ctx: StepContext, action: str, claim: cv.ResourceClaim, problems: str) -> str:
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


def _step(action: str, plugins: Mapping[str, ControllerPlugin], store: ClaimStore) -> Any:
    async def run(ctx: StepContext) -> dict[str, Any] | None:
        inp = msgspec.convert(ctx.input, SagaInput)
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

    return run


def _definition(plan: SagaPlan, plugins: Mapping[str, ControllerPlugin], store: ClaimStore) -> SagaDefinition:
    steps = []
    for sp in plan.steps:
        undo = _step(sp.compensation, plugins, store) if sp.compensation else None

        async def compensate(ctx: StepContext, _undo: Any = undo) -> None:
            await _undo(ctx)

        steps.append(
            Step(
                name=sp.name, action=_step(sp.action, plugins, store), compensate=compensate if undo else None
            )
        )
    return SagaDefinition(saga_type=plan.saga_type, steps=tuple(steps))


def build_definitions(plugins: Mapping[str, ControllerPlugin], store: ClaimStore) -> list[SagaDefinition]:
    """One engine definition per classic plan (allocation, reallocation, teardown)."""
    return [_definition(plan, plugins, store) for plan in PLANS]
