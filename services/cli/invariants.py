"""Rules every recorded decision must keep, whatever code took it (``draflow verify-replay``).

Re-deciding only proves that today's code decides as the recorded one did: a bug present in both
(issue 13: an apply unbound a running pod, the claim controller then freed its GPU and the
scheduler bound it again) replays "identically". These rules are Kubernetes' own and are checked
on the state each event was appended to:

* **a pod is bound once** — ``spec.nodeName`` is set by the binding and never changes while the
  pod exists (upstream's pod update validation refuses it; the binding subresource refuses a pod
  "already assigned to node"); a ``PodBound`` for a bound pod, or any write that changes a bound
  pod's node, breaks it.
* **a running pod keeps its claims** — a reservation of a claim by a pod that is Running, not
  being deleted and still uses the claim is released only after the pod is done or gone
  (upstream's claim controller releases reservations of deleted, finished or unscheduled pods).

Pure: folded objects in, a ``Violation`` out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim

__all__ = ["BOUND_ONCE", "KEEPS_CLAIMS", "Violation", "bound_pod_write", "released_running_pod", "uses_claim"]

BOUND_ONCE = "a pod is bound once: spec.nodeName never changes after binding"
KEEPS_CLAIMS = "a running pod keeps its claims: a reservation goes only after the pod is done or gone"


@dataclass(frozen=True)
class Violation:
    rule: str
    expected: dict[str, Any]  # what the rule requires
    actual: dict[str, Any]  # what the event recorded


def bound_pod_write(
    before: Pod | None, after: Pod | None, event_type: str, node_name: str = ""
) -> Violation | None:
    """A write to a pod (``after`` is the fold of the event onto ``before``) that re-binds it or
    moves it off its node. ``node_name`` is the node a ``PodBound`` names."""
    if before is None or not before.spec.node_name:
        return None
    if event_type == "PodBound":
        return Violation(
            BOUND_ONCE,
            {"spec.nodeName": before.spec.node_name, "bind": "refused: the pod is already assigned"},
            {"spec.nodeName": before.spec.node_name, "bind": node_name},
        )
    if after is None or after.metadata.uid != before.metadata.uid:
        return None  # deleted (a new pod of the same name starts unbound)
    if after.spec.node_name != before.spec.node_name:
        return Violation(
            BOUND_ONCE,
            {"spec.nodeName": before.spec.node_name},
            {"spec.nodeName": after.spec.node_name, "generation": after.metadata.generation},
        )
    return None


def uses_claim(pod: Pod, claim_name: str) -> bool:
    """The pod's spec names the claim, or its status records it as generated for it."""
    if any(c.resource_claim_name == claim_name for c in pod.spec.resource_claims):
        return True
    if any(s.resource_claim_name == claim_name for s in pod.status.resource_claim_statuses):
        return True
    ext = pod.status.extended_resource_claim_status
    return ext is not None and ext.resource_claim_name == claim_name


def released_running_pod(
    claim: ResourceClaim, uids: tuple[str, ...], pods: dict[str, Pod]
) -> Violation | None:
    """A ``ClaimReservationsReleased`` of ``uids`` on ``claim``; ``pods`` by name (the claim's namespace)."""
    for ref in claim.status.reserved_for:
        if ref.uid not in uids:
            continue
        pod = pods.get(ref.name)
        if pod is None or pod.metadata.uid != ref.uid:
            continue
        if pod.status.phase != "Running" or pod.metadata.deletion_timestamp is not None:
            continue
        if not uses_claim(pod, claim.metadata.name):
            continue
        state = {"pod": f"{pod.metadata.namespace}/{pod.metadata.name}", "phase": "Running"}
        return Violation(
            KEEPS_CLAIMS,
            {**state, "reservedFor": [ref.name]},
            {**state, "released": [ref.name], "node": pod.spec.node_name},
        )
    return None
