"""``draflow.services.scheduler.sagas.ownership``: who wrote the facts on an object as they stand now
(pure)."""

from __future__ import annotations

import datetime

import pytest

from draflow.events.api.resource_v1 import ResourceClaimConsumerReference, ResourceClaimStatus
from draflow.events.dra import (
    ClaimAllocated,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodBound,
)
from draflow.events.envelope import Envelope, Event
from draflow.events.objects import object_applied, object_deleted, status_updated
from draflow.services.scheduler.sagas.ownership import (
    allocation_writer,
    binder,
    creator,
    foreign,
    reservation_writer,
)
from tests.builders import make_allocation, make_claim

pytestmark = pytest.mark.kep4381

_T = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _env(data: Event, by: str = "", seq: int = 0) -> Envelope[Event]:
    return Envelope(
        id=str(seq),
        type=type(data).type_name(),
        schema=1,
        subject="s",
        time=_T,
        data=data,
        correlation_id=by,
        seq=seq,
    )


def _reserved(uid: str) -> ClaimReserved:
    return ClaimReserved(consumer=ResourceClaimConsumerReference(resource="pods", name=uid, uid=uid))


CREATED = object_applied(make_claim("c"))
ALLOCATED = ClaimAllocated(allocation=make_allocation("dev-0", node="node-0"))


def test_creator_is_the_append_that_made_the_current_incarnation() -> None:
    assert creator([]) is None
    assert creator([_env(CREATED, "saga-a")]) == "saga-a"
    first = [
        _env(CREATED, "saga-a"),
        _env(ALLOCATED, "saga-a"),
        _env(object_deleted("ResourceClaim"), "saga-a"),
    ]
    assert creator(first) is None  # deleted: nobody's
    assert creator([*first, _env(CREATED, "saga-b")]) == "saga-b"  # same name again, another saga
    assert creator([_env(ALLOCATED, "saga-a")]) is None  # no creating event known


def test_reservation_writer_follows_reserve_and_release() -> None:
    h = [_env(CREATED, "a"), _env(_reserved("p"), "a"), _env(_reserved("q"), "b")]
    assert (reservation_writer(h, "p"), reservation_writer(h, "q"), reservation_writer(h, "x")) == (
        "a",
        "b",
        None,
    )
    released = [*h, _env(ClaimReservationsReleased(uids=("p",)), "a")]
    assert reservation_writer(released, "p") is None and reservation_writer(released, "q") == "b"
    freed = [*h, _env(ClaimDeallocated(released=("p", "q")), "a")]  # released with the allocation
    assert reservation_writer(freed, "p") is None and reservation_writer(freed, "q") is None
    again = [*released, _env(_reserved("p"), "c")]
    assert reservation_writer(again, "p") == "c"
    # a whole-status replacement: nobody in particular wrote what it says
    replaced = [*again, _env(status_updated("ResourceClaim", ResourceClaimStatus()), "")]
    assert reservation_writer(replaced, "p") is None
    # a reservation by a write without a saga (the claim controller) is nobody's saga
    assert reservation_writer([_env(CREATED), _env(_reserved("p"))], "p") == ""
    # PreBind's ClaimAllocated reserves its consumer in the same fact
    both = ClaimAllocated(allocation=ALLOCATED.allocation, consumer=_reserved("p").consumer)
    assert reservation_writer([_env(CREATED, "a"), _env(both, "d")], "p") == "d"
    assert reservation_writer([_env(CREATED, "a"), _env(both, "d")], "q") is None
    assert reservation_writer([_env(CREATED, "a"), _env(ALLOCATED, "d")], "p") is None


def test_allocation_writer_is_the_allocation_in_force() -> None:
    h = [_env(CREATED, "a"), _env(ALLOCATED, "a")]
    assert allocation_writer(h) == "a"
    freed = [*h, _env(ClaimDeallocated(reason="Unreserve"), "a")]
    assert allocation_writer(freed) is None
    assert allocation_writer([*freed, _env(ALLOCATED, "b")]) == "b"
    recreated = [*h, _env(object_deleted("ResourceClaim"), "a"), _env(CREATED, "b")]
    assert allocation_writer(recreated) is None  # the old incarnation's allocation is gone with it


def test_binder_and_foreign() -> None:
    assert binder([]) is None
    assert binder([_env(PodBound(node_name="n"), "saga-b")]) == "saga-b"
    assert foreign("saga-b", "saga-a") and not foreign("saga-a", "saga-a")
    assert not foreign("", "saga-a") and not foreign(None, "saga-a")
