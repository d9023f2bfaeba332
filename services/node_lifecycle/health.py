"""Node health, pure: is the node's kubelet still heard from, and how disrupted is each zone.

After upstream ``pkg/controller/nodelifecycle`` (``monitorNodeHealth`` / ``tryUpdateNodeHealth``,
``ComputeZoneState``). Two heartbeats count: the Ready condition's ``lastHeartbeatTime`` (the
kubelet posting status) and the node Lease's ``renewTime`` (``kube-node-lease/<node>``, renewed
every 10 s). When the later of the two (and of ``since``: a controller that just started gives
every node a fresh grace period, as upstream's in-memory probe times do) is more than the grace
period before ``now``, the node's Ready, MemoryPressure, DiskPressure and PIDPressure conditions
become ``Unknown`` (``NodeStatusUnknown`` / ``Kubelet stopped posting node status.``; a condition
the kubelet never posted is added as ``NodeStatusNeverUpdated``). Upstream writes only when the
Ready condition changes, so does this.

Deviation: upstream measures the grace period from the controller's own clock at the moment it
*noticed* a new heartbeat (so kubelet clock skew does not matter); here the heartbeat's own
timestamps are used, so the decision depends only on the folded objects and ``now``, which the
decision event records. draflow's processes share one clock (or NTP).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from msgspec.structs import replace

from draflow.events.api.coordination_v1 import Lease
from draflow.events.api.core_v1 import Node, NodeCondition
from draflow.services.node_lifecycle.config import LifecycleConfig, parse_time, rfc3339, seconds

__all__ = [
    "CONDITION_TYPES",
    "EXCLUDE_DISRUPTION_LABEL",
    "NEVER_UPDATED_MESSAGE",
    "NEVER_UPDATED_REASON",
    "UNKNOWN_MESSAGE",
    "UNKNOWN_REASON",
    "HeartbeatLost",
    "ZoneState",
    "check_heartbeat",
    "condition",
    "is_ready",
    "last_heartbeat",
    "zone_key",
    "zone_states",
]

READY = "Ready"
# the conditions the controller turns Unknown (NetworkUnavailable is the control plane's)
CONDITION_TYPES = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."
NEVER_UPDATED_REASON = "NodeStatusNeverUpdated"
NEVER_UPDATED_MESSAGE = "Kubelet never posted node status."
EXCLUDE_DISRUPTION_LABEL = "node.kubernetes.io/exclude-disruption"


def condition(node: Node, type_: str) -> NodeCondition | None:
    return next((c for c in node.status.conditions if c.type == type_), None)


def is_ready(node: Node) -> bool:
    """Upstream ``IsNodeReady``: the Ready condition is True."""
    ready = condition(node, READY)
    return ready is not None and ready.status == "True"


def last_heartbeat(node: Node, lease: Lease | None, since: datetime | None = None) -> datetime | None:
    """The latest sign of life: Ready's lastHeartbeatTime (the creation time when the kubelet never
    posted a Ready condition), the Lease's renewTime, and ``since``."""
    ready = condition(node, READY)
    stamps = [
        parse_time(ready.last_heartbeat_time)
        if ready is not None
        else parse_time(node.metadata.creation_timestamp),
        parse_time(lease.spec.renew_time) if lease is not None else None,
        since,
    ]
    known = [s for s in stamps if s is not None]
    return max(known) if known else None


@dataclass(frozen=True)
class HeartbeatLost:
    """The node's kubelet went silent: set ``conditions`` (only those that change)."""

    node_name: str
    conditions: tuple[NodeCondition, ...]
    last_heartbeat: datetime
    grace_period_s: float
    at: datetime


def check_heartbeat(
    node: Node, lease: Lease | None, now: datetime, cfg: LifecycleConfig, since: datetime | None = None
) -> HeartbeatLost | None:
    """What ``tryUpdateNodeHealth`` writes for ``node`` at ``now``, or None (heard from in time, or
    Ready is Unknown already)."""
    ready = condition(node, READY)
    grace = cfg.grace_period_s if ready is not None else cfg.startup_grace_period_s
    probe = last_heartbeat(node, lease, since)
    if probe is None or now <= probe + seconds(grace):
        return None
    stamp = rfc3339(now)
    changed: list[NodeCondition] = []
    for type_ in CONDITION_TYPES:
        current = condition(node, type_)
        if current is None:
            changed.append(
                NodeCondition(
                    type=type_,
                    status="Unknown",
                    reason=NEVER_UPDATED_REASON,
                    message=NEVER_UPDATED_MESSAGE,
                    last_heartbeat_time=node.metadata.creation_timestamp,
                    last_transition_time=stamp,
                )
            )
        elif current.status != "Unknown":
            changed.append(
                replace(
                    current,
                    status="Unknown",
                    reason=UNKNOWN_REASON,
                    message=UNKNOWN_MESSAGE,
                    last_transition_time=stamp,
                )
            )
    if not any(c.type == READY for c in changed):
        return None  # Ready is Unknown already: upstream writes nothing
    return HeartbeatLost(node.metadata.name, tuple(changed), probe, grace, now)


# -- zones ------------------------------------------------------------------------------------------

NORMAL = "Normal"
PARTIAL_DISRUPTION = "PartialDisruption"
FULL_DISRUPTION = "FullDisruption"


def zone_key(node: Node) -> str:
    """Upstream ``GetZoneKey``: region and zone from the (beta, then GA) topology labels."""
    labels = node.metadata.labels
    zone = labels.get("failure-domain.beta.kubernetes.io/zone", labels.get("topology.kubernetes.io/zone", ""))
    region = labels.get(
        "failure-domain.beta.kubernetes.io/region", labels.get("topology.kubernetes.io/region", "")
    )
    if not region and not zone:
        return ""
    return f"{region}:\x00:{zone}"


@dataclass(frozen=True)
class ZoneState:
    state: str
    size: int
    not_ready: int


def zone_states(nodes: Iterable[Node], cfg: LifecycleConfig) -> dict[str, ZoneState]:
    """Upstream ``ComputeZoneState`` per zone, over the nodes not excluded from disruption checks:
    no Ready node = FullDisruption; more than two and at least the threshold not Ready =
    PartialDisruption; Normal otherwise."""
    counts: dict[str, list[int]] = {}
    for node in nodes:
        if EXCLUDE_DISRUPTION_LABEL in node.metadata.labels:
            continue
        ready_not_ready = counts.setdefault(zone_key(node), [0, 0])
        ready_not_ready[0 if is_ready(node) else 1] += 1
    out = {}
    for zone, (ready, not_ready) in counts.items():
        if ready == 0 and not_ready > 0:
            state = FULL_DISRUPTION
        elif not_ready > 2 and not_ready / (ready + not_ready) >= cfg.unhealthy_zone_threshold:
            state = PARTIAL_DISRUPTION
        else:
            state = NORMAL
        out[zone] = ZoneState(state, ready + not_ready, not_ready)
    return out
