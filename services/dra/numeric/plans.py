"""What the scheduler's PreBind writes for a numeric claim, as data the PodScheduling saga carries.

:class:`NumericClaimPlan` is part of the saga's persisted input, so whoever resumes the saga
writes exactly what the scheduling cycle decided. ``ledger`` is the over-commit guard between
scheduler instances: the decision was made when the (node, driver) capacity ledger was at
``version`` and the books counted the claims ``counted`` there; PreBind commits on the ledger at
that version, and a conflict is only accepted when every commit since is one of ``counted``
(this instance already accounted for it), otherwise another scheduler took capacity this
decision did not see and the saga compensates.
"""

from __future__ import annotations

import msgspec

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.meta import OwnerReference

__all__ = ["LEDGER_KIND", "LedgerStamp", "NumericClaimPlan", "ledger_name", "parse_ledger_name"]

LEDGER_KIND = "NumericLedger"


def ledger_name(node: str, driver: str) -> str:
    """The ledger aggregate of one node and driver (cluster-scoped, ``<node>_<driver>``: neither
    a node name nor a driver name may contain ``_``)."""
    return f"{node}_{driver}"


def parse_ledger_name(name: str) -> tuple[str, str] | None:
    node, sep, driver = name.partition("_")
    return (node, driver) if sep and node and driver else None


class LedgerStamp(msgspec.Struct, frozen=True, kw_only=True):
    node: str
    driver: str
    version: int = 0
    counted: tuple[str, ...] = ()


class NumericClaimPlan(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    uid: str = ""
    allocation: cv.NumericAllocation | None = None  # None: allocated already, only reserve
    consumer: OwnerReference
    ledger: LedgerStamp | None = None
