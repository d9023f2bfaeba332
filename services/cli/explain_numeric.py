"""How ``draflow explain`` words numeric claims (KEP-4381): their facts and the saga's plans."""

from __future__ import annotations

from typing import Any

from draflow.events.numeric import (
    NumericClaimAllocated,
    NumericClaimConditionRecorded,
    NumericClaimDeallocated,
    NumericClaimReservationsReleased,
    NumericClaimReserved,
)

__all__ = ["NUMERIC_CLAIM_EVENTS", "allocation_summary", "numeric_claim_text", "numeric_plan_text"]

NUMERIC_CLAIM_EVENTS = (
    NumericClaimAllocated,
    NumericClaimReserved,
    NumericClaimReservationsReleased,
    NumericClaimDeallocated,
    NumericClaimConditionRecorded,
)


def allocation_summary(kind: str, api_version: str, data: Any) -> str:
    """``counter.dra.config.k8s.io Allocation {instance: frobnicators, count: 3}``."""
    group = api_version.rpartition("/")[0] or api_version
    if isinstance(data, dict):
        body = ", ".join(f"{k}: {v}" for k, v in data.items())
        return f"{group} {kind} {{{body}}}"
    return f"{group} {kind}"


def numeric_claim_text(d: Any) -> str:
    if isinstance(d, NumericClaimAllocated):
        a = d.allocation
        cls = (
            a.resource_class.get("metadata", {}).get("name", "?")
            if isinstance(a.resource_class, dict)
            else "?"
        )
        summary = allocation_summary(a.kind, a.api_version, a.data)
        what = f"allocated (numeric, class {cls}) {summary} on {a.node_name}"
        return what + (f", reserved for pods/{d.consumer.name}" if d.consumer is not None else "")
    if isinstance(d, NumericClaimReserved):
        return f"reserved for pods/{d.consumer.name}"
    if isinstance(d, NumericClaimReservationsReleased):
        return f"reservations released ({len(d.uids)})"
    if isinstance(d, NumericClaimDeallocated):
        return f"deallocated ({d.reason})" if d.reason else "deallocated"
    if isinstance(d, NumericClaimConditionRecorded):
        return f"condition {d.condition.type}={d.condition.status}: {d.condition.message}"
    return type(d).__name__


def numeric_plan_text(plan: Any) -> str:
    """One numeric claim of a PodScheduling saga's input (a dict, as stored)."""
    name = plan.get("name", "?") if isinstance(plan, dict) else "?"
    alloc = plan.get("allocation") if isinstance(plan, dict) else None
    if not isinstance(alloc, dict):
        return f"{name} (reserve)"
    return (
        f"{name} {allocation_summary(alloc.get('kind', ''), alloc.get('apiVersion', ''), alloc.get('data'))}"
    )
