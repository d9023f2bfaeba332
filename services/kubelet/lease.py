"""The kubelet's node lease, pure: the Lease it keeps in ``kube-node-lease`` and when to renew it.

After upstream ``k8s.io/component-helpers/apimachinery/lease`` as the kubelet uses it: the Lease
is named after the node, held by it (``holderIdentity``), lasts ``leaseDurationSeconds`` (the
kubelet's ``nodeLeaseDurationSeconds``, 40 by default), is owned by the Node, and is renewed every
quarter of its duration (10 s). A renewal is the small ``LeaseRenewed`` fact; the whole object is
written only when it is created or its holder, duration or owner is not what this kubelet wants.
"""

from __future__ import annotations

from datetime import datetime

from draflow.events.api.coordination_v1 import NODE_LEASE_NAMESPACE, Lease, LeaseSpec, micro_time
from draflow.events.api.meta import ObjectMeta, OwnerReference

__all__ = ["DEFAULT_LEASE_DURATION_S", "RENEW_FRACTION", "lease_object", "lease_outdated", "renew_interval"]

DEFAULT_LEASE_DURATION_S = 40
RENEW_FRACTION = 0.25  # upstream nodeLeaseRenewIntervalFraction


def renew_interval(duration_s: float) -> float:
    return duration_s * RENEW_FRACTION


def lease_object(node_name: str, now: datetime, duration_s: int, node_uid: str = "") -> Lease:
    """The Lease as the kubelet writes it (an owner reference once the Node's uid is known)."""
    owners = (
        (OwnerReference(api_version="v1", kind="Node", name=node_name, uid=node_uid),) if node_uid else ()
    )
    return Lease(
        metadata=ObjectMeta(name=node_name, namespace=NODE_LEASE_NAMESPACE, owner_references=owners),
        spec=LeaseSpec(
            holder_identity=node_name,
            lease_duration_seconds=duration_s,
            renew_time=micro_time(now),
        ),
    )


def lease_outdated(lease: Lease, node_name: str, duration_s: int, node_uid: str = "") -> bool:
    """True when a renewal alone would leave the Lease wrong (someone else's holder, another
    duration, no owner reference to the Node although its uid is known)."""
    spec = lease.spec
    if spec.holder_identity != node_name or spec.lease_duration_seconds != duration_s:
        return True
    return bool(node_uid) and not any(
        r.kind == "Node" and r.uid == node_uid for r in lease.metadata.owner_references
    )
