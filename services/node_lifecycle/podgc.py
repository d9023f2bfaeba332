"""Pod garbage collection for lost nodes, pure: which pods no kubelet will ever finish.

After upstream ``pkg/controller/podgc`` (``gcTerminating``, ``gcOrphaned``). A pod evicted from an
unreachable node is only *marked* for deletion: its kubelet must confirm it, and a dead kubelet
never does, so the pod stays Terminating and keeps its ResourceClaims reserved — in Kubernetes as
here. Two things finish it, as upstream:

* the node gets the ``node.kubernetes.io/out-of-service`` taint (any effect) while not Ready
  (non-graceful node shutdown): every terminating pod on it is force-deleted;
* the Node is deleted: every pod bound to it is force-deleted (condition ``DisruptionTarget``
  ``DeletionByPodGC`` / ``PodGC: node no longer exists``).

Force-deleting marks a pod that is not terminal ``Failed`` first, then deletes it with grace period
0; the claim controller then drops its reservations and deallocates the claims.

Deviation: upstream waits 40 s (quarantine) and asks the API server again before believing a node
is gone, because its informer may lag. The log is the one ordered source of truth here, so a node
missing from it is gone; only a pod younger than ``orphan_quarantine_s`` (created with a
``nodeName`` its kubelet has not registered yet) is given that time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from events.api.core_v1 import Node, Pod
from services.dra.resourceclaim import is_pod_terminal
from services.node_lifecycle.config import parse_time, seconds
from services.node_lifecycle.health import is_ready
from services.node_lifecycle.taints import OUT_OF_SERVICE

__all__ = ["ORPHAN_MESSAGE", "ORPHAN_REASON", "ForceDelete", "GcPlan", "collect_pods"]

ORPHAN_REASON = "DeletionByPodGC"
ORPHAN_MESSAGE = "PodGC: node no longer exists"


@dataclass(frozen=True)
class ForceDelete:
    """Mark ``namespace/name`` Failed (when it is not terminal) with an optional DisruptionTarget
    (reason, message), then delete it with grace period 0."""

    namespace: str
    name: str
    uid: str
    node_name: str
    why: str  # "out-of-service" | "orphaned"
    mark_failed: bool
    condition: tuple[str, str] | None = None


@dataclass(frozen=True)
class GcPlan:
    deletes: tuple[ForceDelete, ...]
    next_due: datetime | None  # when a quarantined orphan becomes due


def collect_pods(
    pods: Iterable[Pod], nodes: Mapping[str, Node], now: datetime, quarantine_s: float
) -> GcPlan:
    out: list[ForceDelete] = []
    waiting: list[datetime] = []
    for pod in pods:
        meta, node_name = pod.metadata, pod.spec.node_name
        if not node_name:
            continue
        node = nodes.get(node_name)
        if node is None:
            created = parse_time(meta.creation_timestamp)
            ready_at = created + seconds(quarantine_s) if created is not None else now
            if ready_at > now:
                waiting.append(ready_at)
                continue
            out.append(
                ForceDelete(
                    meta.namespace,
                    meta.name,
                    meta.uid,
                    node_name,
                    "orphaned",
                    not is_pod_terminal(pod),
                    (ORPHAN_REASON, ORPHAN_MESSAGE),
                )
            )
        elif (
            meta.deletion_timestamp is not None
            and not is_ready(node)
            and any(t.key == OUT_OF_SERVICE for t in node.spec.taints)
        ):
            out.append(
                ForceDelete(
                    meta.namespace, meta.name, meta.uid, node_name, "out-of-service", not is_pod_terminal(pod)
                )
            )
    return GcPlan(tuple(out), min(waiting, default=None))
