"""``coordination.k8s.io/v1`` Lease: the node heartbeat (``kube-node-lease/<node>``).

Field for field ``k8s.io/api/coordination/v1``. ``acquireTime`` and ``renewTime`` are MicroTime
(RFC 3339 with microseconds, ``2006-01-02T15:04:05.000000Z``), kept as strings like every other
timestamp. The kubelet creates its node's Lease and renews it with ``LeaseRenewed``
(:mod:`draflow.events.node`), which moves ``spec.renewTime`` only: one small fact per renewal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

import msgspec

from draflow.events.api.base import ApiStruct, Int32
from draflow.events.api.meta import ObjectMeta

__all__ = ["NODE_LEASE_NAMESPACE", "Lease", "LeaseSpec", "micro_time"]

NODE_LEASE_NAMESPACE = "kube-node-lease"


class LeaseSpec(ApiStruct, frozen=True):
    holder_identity: str | None = None
    lease_duration_seconds: Int32 | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: Int32 | None = None
    strategy: str | None = None
    preferred_holder: str | None = None


class Lease(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = "coordination.k8s.io/v1"
    KIND: ClassVar[str] = "Lease"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: LeaseSpec = msgspec.field(default_factory=LeaseSpec)


def micro_time(t: datetime) -> str:
    """metav1.MicroTime as the API writes it: microseconds, UTC, ``Z``."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
