"""Node-side facts that ``draflow.events.dra`` does not cover: what the kubelet saw of the containers, the
node heartbeat, and what the node lifecycle controller decided about silent nodes.

* ``PodContainerStatusesReported`` carries ``status.containerStatuses`` /
  ``status.initContainerStatuses`` as the kubelet (its simulated container runtime) observed
  them — the per-container part of a pod's status, which ``PodStarted`` / ``PodSucceeded`` leave
  alone. Appended in the same atomic batch as the phase fact
  it belongs to.
* ``LeaseRenewed`` (on ``Lease.kube-node-lease.<node>``): the kubelet's heartbeat, one small fact per
  renewal (every ``leaseDurationSeconds / 4``, 10 s by default), moving ``spec.renewTime`` only.
* ``NodeHeartbeatLost``, ``NodeTainted``, ``NodeUntainted`` (on ``Node._.<node>``) and
  ``PodDisruptionTargeted`` (on the pod) are the node lifecycle controller's decisions
  (``draflow.services.node_lifecycle``). Each carries the time it was decided at (``at``), the log
  position the controller's view had reached (``observed_seq``) and, for a lost heartbeat, the
  heartbeat it was decided on, so ``draflow verify-replay`` re-checks the decision without a clock.

Reducers: :mod:`draflow.projections.node`.
"""

from __future__ import annotations

from typing import Any

from draflow.events.api.core_v1 import NodeCondition, Taint
from draflow.events.envelope import Event

__all__ = [
    "LeaseRenewed",
    "NodeHeartbeatLost",
    "NodeTainted",
    "NodeUntainted",
    "PodContainerStatusesReported",
    "PodDisruptionTargeted",
]


class PodContainerStatusesReported(Event, frozen=True, kw_only=True):
    """The containers' statuses (core/v1 ContainerStatus objects as JSON), replacing the old ones.

    ``at`` (set by the kubelet's simulated container runtime when a container exited, restarted or
    went into back-off): the pod's ``ContainersReady`` / ``Ready`` conditions follow the statuses'
    ``ready`` flags from then on (``ContainersNotReady``, ``containers with unready status: [c]``).
    Without it (older events, and the statuses reported with ``PodStarted``) they are left alone.
    """

    container_statuses: tuple[dict[str, Any], ...] = ()
    init_container_statuses: tuple[dict[str, Any], ...] = ()
    at: str = ""


class LeaseRenewed(Event, frozen=True, kw_only=True):
    """The holder renewed its Lease: ``spec.renewTime`` (a MicroTime) moves to ``renew_time``."""

    renew_time: str


class NodeHeartbeatLost(Event, frozen=True, kw_only=True):
    """No heartbeat (Lease renewal or Ready condition) from the node's kubelet since
    ``last_heartbeat``, longer than ``grace_period_seconds`` before ``at``: the controller set
    ``conditions`` (``Ready`` and the pressure conditions ``Unknown``, replacing those of the same
    type, appended when the kubelet never posted them)."""

    conditions: tuple[NodeCondition, ...] = ()
    last_heartbeat: str = ""
    grace_period_seconds: float = 0.0
    at: str = ""
    observed_seq: int = 0  # the log position the controller's view had reached when it decided


class NodeTainted(Event, frozen=True, kw_only=True):
    """The controller added ``taints`` (each replaces a taint with the same key and effect);
    ``reason`` says which condition asked for them."""

    taints: tuple[Taint, ...] = ()
    reason: str = ""
    at: str = ""
    observed_seq: int = 0


class NodeUntainted(Event, frozen=True, kw_only=True):
    """The controller removed the taints with these keys and effects."""

    taints: tuple[Taint, ...] = ()
    reason: str = ""
    at: str = ""
    observed_seq: int = 0


class PodDisruptionTargeted(Event, frozen=True, kw_only=True):
    """The pod is about to be deleted by a controller (condition ``DisruptionTarget=True`` with this
    reason and message, as upstream's taint eviction and pod GC write it before deleting)."""

    reason: str
    message: str = ""
    at: str = ""
    observed_seq: int = 0
