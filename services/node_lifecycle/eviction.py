"""Taint-based eviction, pure: which pods on a NoExecute-tainted node go, and when.

After upstream ``pkg/controller/tainteviction`` (``processPodOnNode``, ``getMinTolerationTime``,
``GetMatchingTolerations``): every pod bound to a node with NoExecute taints (not yet being
deleted) must tolerate each of them; the first toleration matching a taint is the one used. A pod
that does not tolerate them all is evicted at once; otherwise it is evicted once the smallest
``tolerationSeconds`` of the used tolerations has passed (0 or less: at once; none set: never).
Eviction means: condition ``DisruptionTarget=True`` (``DeletionByTaintManager`` / ``Taint
manager: deleting due to NoExecute taint``), a Normal Event ``TaintManagerEviction`` (``Marking
for deletion Pod <ns>/<name>``), and a (graceful) delete, as upstream.

The toleration clock starts at the earliest ``timeAdded`` of the node's NoExecute taints, or when
the pod was bound (its PodScheduled transition) if that is later. Upstream starts it when its
in-memory queue first saw the pod on the tainted node; the taint's and the binding's recorded
times stand for that moment, so the decision depends only on the objects and ``now``. A NoExecute
taint without ``timeAdded`` (one a user wrote) counts from the binding.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from draflow.events.api.core_v1 import Node, Pod, Taint, Toleration
from draflow.services.node_lifecycle.config import parse_time, seconds
from draflow.services.node_lifecycle.taints import NO_EXECUTE

__all__ = [
    "EVICTION_EVENT_REASON",
    "EVICTION_MESSAGE",
    "EVICTION_REASON",
    "Eviction",
    "EvictionPlan",
    "min_toleration_seconds",
    "plan_evictions",
]

EVICTION_REASON = "DeletionByTaintManager"
EVICTION_MESSAGE = "Taint manager: deleting due to NoExecute taint"
EVICTION_EVENT_REASON = "TaintManagerEviction"


@dataclass(frozen=True)
class Eviction:
    """Evict ``namespace/name`` (uid-checked) from ``node_name``; due at ``due`` (<= now)."""

    namespace: str
    name: str
    uid: str
    node_name: str
    due: datetime


@dataclass(frozen=True)
class EvictionPlan:
    """Pods due now, pods whose eviction is scheduled later (key -> due), the earliest of those."""

    due: tuple[Eviction, ...]
    scheduled: dict[tuple[str, str], datetime]

    @property
    def next_due(self) -> datetime | None:
        return min(self.scheduled.values(), default=None)


def matching_tolerations(
    taints: Iterable[Taint], tolerations: tuple[Toleration, ...]
) -> list[Toleration] | None:
    """The first toleration of each taint; None when some taint is not tolerated."""
    used = []
    for taint in taints:
        match = next((t for t in tolerations if t.tolerates(taint)), None)
        if match is None:
            return None
        used.append(match)
    return used


def min_toleration_seconds(used: Iterable[Toleration]) -> float | None:
    """The smallest ``tolerationSeconds`` (0 when any is <= 0); None: tolerated forever."""
    limits = [t.toleration_seconds for t in used if t.toleration_seconds is not None]
    if not limits:
        return None
    return float(max(min(limits), 0))


def _bound_at(pod: Pod) -> datetime | None:
    cond = next((c for c in pod.status.conditions if c.type == "PodScheduled" and c.status == "True"), None)
    return parse_time(cond.last_transition_time) if cond is not None else None


def plan_evictions(node: Node, pods: Iterable[Pod], now: datetime) -> EvictionPlan:
    """The taint manager's view of ``node`` at ``now`` (``pods``: any pods; those bound elsewhere
    or already being deleted are skipped)."""
    taints = [t for t in node.spec.taints if t.effect == NO_EXECUTE]
    due: list[Eviction] = []
    scheduled: dict[tuple[str, str], datetime] = {}
    if not taints:
        return EvictionPlan((), scheduled)
    added = [t for t in (parse_time(t.time_added) for t in taints) if t is not None]
    tainted_since = min(added) if added else None
    name = node.metadata.name
    for pod in pods:
        meta = pod.metadata
        if pod.spec.node_name != name or meta.deletion_timestamp is not None:
            continue
        used = matching_tolerations(taints, pod.spec.tolerations)
        if used is None:
            due.append(Eviction(meta.namespace, meta.name, meta.uid, name, now))
            continue
        limit = min_toleration_seconds(used)
        if limit is None:
            continue
        starts = [t for t in (tainted_since, _bound_at(pod)) if t is not None]
        start = max(starts) if starts else now
        when = start + seconds(limit)
        if when <= now:
            due.append(Eviction(meta.namespace, meta.name, meta.uid, name, when))
        else:
            scheduled[(meta.namespace, meta.name)] = when
    return EvictionPlan(tuple(due), scheduled)
