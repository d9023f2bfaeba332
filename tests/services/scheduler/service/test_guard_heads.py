"""The guards' versions a decision expects (:class:`GuardHeads`): a take counts only once the
snapshot has its claim allocated with that device. Pure: guard messages and claims as values."""

from __future__ import annotations

from draflow.events.guard import GuardReleased, GuardTaken
from draflow.infra.guard import guard_subject
from draflow.services.dra.guards import allocation_guard_keys
from draflow.services.scheduler.service.guard_heads import GuardHeads
from tests.builders import exact, make_allocation, make_claim

ROOT = "t"


def _subject(device: str) -> str:
    ((scope, key),) = allocation_guard_keys(make_allocation(device, node="node-0"))
    return guard_subject(ROOT, scope, key)


def _take(name: str) -> GuardTaken:
    return GuardTaken(holder=f"ResourceClaim default/{name}", holder_uid=f"uid-{name}")


UNALLOCATED = make_claim("c1", exact(), uid="uid-c1")
ON_DEV0 = make_claim("c1", exact(), uid="uid-c1", allocation=make_allocation("dev-0", node="node-0"))
ON_DEV1 = make_claim("c1", exact(), uid="uid-c1", allocation=make_allocation("dev-1", node="node-0"))
DEV0 = _subject("dev-0")


def test_a_take_after_its_allocation_counts_at_once_as_in_logs_written_before() -> None:
    heads = GuardHeads(ROOT, None)
    heads.apply(DEV0, 7, _take("c1"), ON_DEV0)  # the old batch: the allocation came first
    assert heads[DEV0] == 7 and heads.unbacked == {} and dict(heads) == {DEV0: 7}


def test_a_take_before_its_allocation_holds_the_version_back_until_the_allocation() -> None:
    heads = GuardHeads(ROOT, None)
    heads.apply(DEV0, 3, GuardReleased(holder="ResourceClaim default/old", holder_uid="uid-old"), None)
    heads.apply(DEV0, 7, _take("c1"), UNALLOCATED)
    assert heads[DEV0] == 6 and heads.unbacked == {DEV0: (7,)}
    heads.claim_changed(ON_DEV1)  # allocated, but not with this device: still unbacked
    assert heads[DEV0] == 6
    heads.claim_changed(ON_DEV0)
    assert heads[DEV0] == 7 and heads.unbacked == {}


def test_the_earliest_unbacked_take_decides_and_a_release_settles_its_holder() -> None:
    heads = GuardHeads(ROOT, None)
    heads.apply(DEV0, 7, _take("c1"), None)  # its claim not in the snapshot at all
    heads.apply(DEV0, 9, _take("c2"), None)
    assert heads[DEV0] == 6 and heads.unbacked == {DEV0: (7, 9)}
    heads.apply(DEV0, 11, GuardReleased(holder="ResourceClaim default/c1", holder_uid="uid-c1"), None)
    assert heads[DEV0] == 8 and heads.unbacked == {DEV0: (9,)}
    heads.claim_changed(
        make_claim("c2", exact(), uid="uid-c2", allocation=make_allocation("dev-0", node="node-0"))
    )
    assert heads[DEV0] == 11 and heads.unbacked == {}


def test_a_backed_take_stays_counted_when_its_claim_is_deallocated_without_a_release() -> None:
    """``ClaimDeallocated`` is the only message of a deallocation: once the take was backed, the
    claim freed changes nothing here (the device is free in the objects, which decide)."""
    heads = GuardHeads(ROOT, None)
    heads.apply(DEV0, 7, _take("c1"), UNALLOCATED)
    heads.claim_changed(ON_DEV0)
    heads.claim_changed(UNALLOCATED)  # deallocated, no GuardReleased follows
    assert heads[DEV0] == 7 and heads.unbacked == {}


def test_a_take_whose_claim_is_deleted_counts_nothing_can_back_it() -> None:
    heads = GuardHeads(ROOT, None)
    heads.apply(DEV0, 7, _take("c1"), UNALLOCATED)
    heads.apply(DEV0, 9, _take("c2"), None)
    assert heads[DEV0] == 6
    heads.claim_deleted("uid-c1")  # e.g. its pod deleted before the allocation landed
    assert heads[DEV0] == 8 and heads.unbacked == {DEV0: (9,)}
    heads.claim_deleted("uid-other")
    assert heads[DEV0] == 8


def test_a_take_the_caller_knows_settled_counts_at_once() -> None:
    """What a snapshot started from an objects snapshot tells: the take's claim is gone, or its
    log shows it allocated with the device after the take (freed since)."""
    heads = GuardHeads(ROOT, None)
    heads.apply(DEV0, 7, _take("c1"), UNALLOCATED, settled=True)
    assert heads[DEV0] == 7 and heads.unbacked == {}
    assert heads.backs(ON_DEV0, "uid-c1", DEV0) and not heads.backs(ON_DEV1, "uid-c1", DEV0)
    assert not heads.backs(ON_DEV0, "uid-c2", DEV0)  # another claim under the name
