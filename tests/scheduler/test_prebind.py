"""The claim objects the PodScheduling and reallocation sagas write (pure helpers)."""

from __future__ import annotations

import msgspec
import pytest

from events.api.resource_v1 import ResourceClaimConsumerReference
from services.dra.resourceclaim import DELETE_PROTECTION_FINALIZER, ClaimRef
from services.scheduler.framework import ClaimBinding
from services.scheduler.plugins.dynamicresources import (
    PreBindConflict,
    deallocated,
    prebind_claim,
    unreserve_claim,
)
from tests.scheduler.builders import allocation_on, make_claim, make_pod, with_status

POD = make_pod("p")
CONSUMER = ResourceClaimConsumerReference(resource="pods", name="p", uid=POD.metadata.uid)


def _binding(claim, allocation) -> ClaimBinding:
    return ClaimBinding(ClaimRef.of(claim), allocation, CONSUMER)


def test_prebind_writes_finalizer_allocation_and_reservation() -> None:
    claim = make_claim("c")
    allocation = allocation_on("n1", "dev-0")
    written = prebind_claim(claim, _binding(claim, allocation))
    assert written.metadata.finalizers == (DELETE_PROTECTION_FINALIZER,)
    assert written.status.allocation == allocation
    assert written.status.reserved_for == (CONSUMER,)
    # Idempotent: applying it again changes nothing (a retried saga step appends nothing).
    assert prebind_claim(written, _binding(claim, allocation)) is written
    # ...also when the stored claim was read back from the log (equal, not the same object), as
    # when another process resumes the saga after a crash
    reread = msgspec.json.decode(msgspec.json.encode(written), type=type(written))
    assert reread.status.allocation is not allocation
    assert prebind_claim(reread, _binding(claim, allocation)) is reread


def test_prebind_reserve_only_for_allocated_claims() -> None:
    allocation = allocation_on("n1", "dev-0")
    claim = with_status(make_claim("c"), allocation, [make_pod("other")])
    written = prebind_claim(claim, _binding(claim, None))
    assert [r.name for r in written.status.reserved_for] == ["other", "p"]
    assert written.status.allocation is allocation


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("allocated-elsewhere", "got allocated elsewhere in the meantime"),
        ("deleted", "got deleted in the meantime"),
        ("replaced", "was replaced"),
        ("deallocated", "got deallocated in the meantime"),
        ("full", "is reserved for 256 consumers already"),
    ],
)
def test_prebind_conflicts(change: str, message: str) -> None:
    claim = make_claim("c")
    allocation = allocation_on("n1", "dev-0")
    binding = _binding(claim, allocation)
    current = claim
    if change == "allocated-elsewhere":
        current = with_status(claim, allocation_on("n2", "dev-5"))
    elif change == "deleted":
        current = msgspec.structs.replace(
            claim, metadata=msgspec.structs.replace(claim.metadata, deletion_timestamp="2026-01-01T00:00:00Z")
        )
    elif change == "replaced":
        current = make_claim("c", uid="another-uid")
    elif change == "deallocated":
        binding = _binding(claim, None)
    elif change == "full":
        current = with_status(claim, allocation, [make_pod(f"u{i}") for i in range(256)])
    with pytest.raises(PreBindConflict, match=message):
        prebind_claim(current, binding)


def test_unreserve_removes_only_the_pod() -> None:
    claim = with_status(make_claim("c"), allocation_on("n1", "dev-0"), [make_pod("other"), POD])
    out = unreserve_claim(claim, POD)
    assert [r.name for r in out.status.reserved_for] == ["other"]
    assert out.status.allocation is not None  # the claim controller deallocates, as upstream
    assert unreserve_claim(out, POD) is out


def test_deallocation_for_reallocation() -> None:
    claim = with_status(make_claim("c"), allocation_on("n1", "dev-0"), [POD])
    out = deallocated(claim, ClaimRef.of(claim), POD)
    assert out.status.allocation is None and out.status.reserved_for == ()
    assert deallocated(out, ClaimRef.of(claim), POD) is out
    used = with_status(make_claim("c"), allocation_on("n1", "dev-0"), [make_pod("other")])
    with pytest.raises(PreBindConflict, match="in use by another consumer"):
        deallocated(used, ClaimRef.of(used), POD)
