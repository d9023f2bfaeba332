"""The driver-controller's claim writes go through ``validate_classic`` (as the scheduler's do).

Pure: the steps of the classic allocation saga run against an in-memory :class:`ClaimStore` and a
step context that only carries the saga's input and deps (no engine, no log)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

import pytest

from events.api import classic_v1alpha1 as cv
from events.api.base import ApiStruct
from events.api.core_v1 import Pod
from events.api.meta import ObjectMeta
from infra.errors import PermanentError
from sagas.engine import SagaDefinition, StepContext
from services.dra.classic import claims as cl
from services.dra.classic.plugin import (
    AllocateOutcome,
    AllocationResult,
    ClaimAllocation,
    DeallocateOutcome,
    Freed,
    Parameters,
)
from services.dra.classic.validation import admit_classic
from services.driver_controller.saga_wiring import ALLOCATION, ClassicSagaDeps, write_problems
from services.driver_controller.sagas import SagaInput

DRIVER = "bad.example.com"


class Driver:
    """Allocates with the ``user_limit`` it is given (0 is invalid: -1 or >= 1)."""

    @property
    def driver_name(self) -> str:
        return DRIVER

    def __init__(self, user_limit: int) -> None:
        self.user_limit = user_limit
        self.allocated: set[str] = set()

    def observe(self, obj: ApiStruct) -> None:
        return None

    def allocate(
        self,
        claim: cv.ResourceClaim,
        resource_class: cv.ResourceClass,
        parameters: Parameters,
        selected_node: str | None,
    ) -> AllocateOutcome:
        self.allocated.add(claim.metadata.uid)
        return AllocationResult(attributes={"node": selected_node or ""}, user_limit=self.user_limit)

    def deallocate(self, claim: cv.ResourceClaim) -> DeallocateOutcome:
        self.allocated.discard(claim.metadata.uid)
        return Freed()

    def unsuitable_nodes(
        self, pod: Pod | None, claims: Sequence[ClaimAllocation], potential_nodes: Sequence[str]
    ) -> dict[str, tuple[str, ...]]:
        return {}


class MemoryClaims:
    """An in-memory ClaimStore: one claim, its class, and every write."""

    def __init__(self, claim: cv.ResourceClaim, cls: cv.ResourceClass) -> None:
        self.claim = claim
        self.cls = cls
        self.seq = 1
        self.writes: list[cv.ResourceClaim] = []

    async def load(self, namespace: str, name: str) -> tuple[cv.ResourceClaim | None, int]:
        return self.claim, self.seq

    async def load_class(self, name: str) -> cv.ResourceClass | None:
        return self.cls

    async def write(self, ctx: StepContext, old: cv.ResourceClaim, new: cv.ResourceClaim, seq: int) -> None:
        assert seq == self.seq
        self.writes.append(new)
        self.claim, self.seq = new, self.seq + 1


class Ctx:
    def __init__(self, inp: SagaInput, deps: ClassicSagaDeps, compensating: bool = False) -> None:
        self.input = inp
        self.deps = deps
        self.saga_id = "alloc-1"
        self.compensating = compensating


def _setup(user_limit: int) -> tuple[Driver, MemoryClaims, SagaDefinition, SagaInput]:
    cls = admit_classic(cv.ResourceClass(metadata=ObjectMeta(name="c", uid="uid-c"), driver_name=DRIVER))
    claim = admit_classic(
        cv.ResourceClaim(
            metadata=ObjectMeta(name="x", namespace="default", uid="uid-x"),
            spec=cv.ResourceClaimSpec(resource_class_name="c", parameters={}),
        )
    )
    claim = cl.with_finalizer(cl.with_selected_node(claim, "n1"), DRIVER)
    driver = Driver(user_limit)
    store = MemoryClaims(claim, cls)
    alloc = ALLOCATION
    inp = SagaInput(namespace="default", name="x", uid="uid-x", driver_name=DRIVER, selected_node="n1")
    return driver, store, alloc, inp


def test_write_problems_are_the_status_verbs_checks() -> None:
    _, store, _, _ = _setup(1)
    claim = store.claim
    ok = cl.allocated(claim, DRIVER, AllocationResult(user_limit=1))
    assert write_problems(claim, ok) == ""
    bad = cl.allocated(claim, DRIVER, AllocationResult(user_limit=0))
    assert "status.userLimit: Invalid value: 0" in write_problems(claim, bad)
    # phase transitions as the apiserver allows them: Reallocate straight from Pending is not one;
    # cancelling a reallocation the driver cannot carry out (Reallocate -> Allocated) is
    assert "status.phase" in write_problems(claim, cl.reallocate(claim))
    asked = cl.reallocate(ok)
    assert write_problems(asked, cl.reallocation_cancelled(asked)) == ""
    assert write_problems(asked, cl.deallocated(asked)) == ""


async def test_a_valid_allocation_is_written() -> None:
    driver, store, alloc, inp = _setup(1)
    step = alloc.steps[-1]
    await step.action(cast(StepContext, Ctx(inp, ClassicSagaDeps({DRIVER: driver}, store))))
    assert [w.status.phase for w in store.writes] == [cv.ALLOCATED]
    assert driver.allocated == {"uid-x"}


async def test_an_invalid_allocation_write_is_a_definite_failure(caplog: pytest.LogCaptureFixture) -> None:
    """The driver answers with userLimit 0: nothing invalid reaches the claim; the step fails
    permanently (the engine compensates: the driver frees), the node is recorded as unsuitable
    as for a definite driver failure, and the log says why."""
    driver, store, alloc, inp = _setup(0)
    step = alloc.steps[-1]
    assert step.name == "allocate-and-record" and step.compensate is not None
    with caplog.at_level(logging.ERROR, logger="services.driver_controller.saga_wiring"):
        with pytest.raises(PermanentError, match=r"invalid claim write refused: .*status\.userLimit"):
            await step.action(cast(StepContext, Ctx(inp, ClassicSagaDeps({DRIVER: driver}, store))))
    assert all(w.status.phase != cv.ALLOCATED for w in store.writes)
    assert len(store.writes) == 1
    recorded = store.writes[0]
    assert cl.scheduling(recorded).scheduler.selected_node == ""
    assert cl.scheduling(recorded).driver.unsuitable_nodes == ("n1",)
    assert any(
        "saga alloc-1: step DriverAllocate would write an invalid claim default/x, not appended" in r.message
        and "userLimit" in r.message
        for r in caplog.records
    ), caplog.records
    # the compensation of the failed step frees what the driver booked
    assert driver.allocated == {"uid-x"}
    ctx = Ctx(inp, ClassicSagaDeps({DRIVER: driver}, store), compensating=True)
    await step.compensate(cast(StepContext, ctx))
    assert driver.allocated == set()
