"""KEP-4381's facts on numeric claims (classic ``cdi.k8s.io`` ResourceClaims whose class has
``numericParameters``), on the claim's subject ``<root>.ev.ClassicResourceClaim.<ns>.<name>``.

* :class:`NumericClaimAllocated`: the scheduler's PreBind allocated the claim from published
  capacity (no driver controller): phase Allocated, ``status.numericAllocation``, the driver,
  ``availableOnNodes`` = that node, ``userLimit`` (-1 when shareable), the pod in
  ``reservedFor`` and the ``numeric.dra.k8s.io/delete-protection`` finalizer, in one fact.
* :class:`NumericClaimReserved`: another pod uses the allocated claim (``reservedFor``).
* :class:`NumericClaimDeallocated`: the allocation was cleared directly and that finalizer
  removed (the claim controller on an unused claim, the scheduler on Unreserve or Reallocate).
* :class:`NumericClaimReservationsReleased`: pods left ``reservedFor`` (a saga's compensation).
* :class:`NumericCapacityCommitted`: on ``<root>.ev.NumericLedger._.<node>.<driver>``, the
  scheduler committed capacity of that node and driver to a claim. It is the serialization point
  between scheduler instances (appended at the ledger version the decision saw); the claim
  status stays the source of truth for what is allocated.
* :class:`NumericClaimConditionRecorded`: a condition on the claim (the scheduler saying why
  the class's template cannot map the claim's parameters).

The reducers are in :mod:`draflow.projections.numeric`.
"""

from __future__ import annotations

from draflow.events.api.classic_v1alpha1 import NumericAllocation
from draflow.events.api.meta import Condition, OwnerReference
from draflow.events.envelope import Event

__all__ = [
    "NUMERIC_FINALIZER",
    "NumericCapacityCommitted",
    "NumericClaimAllocated",
    "NumericClaimConditionRecorded",
    "NumericClaimDeallocated",
    "NumericClaimReservationsReleased",
    "NumericClaimReserved",
]

NUMERIC_FINALIZER = "numeric.dra.k8s.io/delete-protection"


class NumericClaimAllocated(Event, frozen=True, kw_only=True):
    allocation: NumericAllocation
    consumer: OwnerReference | None = None


class NumericClaimReserved(Event, frozen=True, kw_only=True):
    consumer: OwnerReference


class NumericClaimReservationsReleased(Event, frozen=True, kw_only=True):
    uids: tuple[str, ...] = ()


class NumericCapacityCommitted(Event, frozen=True, kw_only=True):
    claim_uid: str
    claim: str = ""  # namespace/name, for people reading the log


class NumericClaimDeallocated(Event, frozen=True, kw_only=True):
    reason: str = ""


class NumericClaimConditionRecorded(Event, frozen=True, kw_only=True):
    condition: Condition
