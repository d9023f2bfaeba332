"""One pass of the node lifecycle controller over every node, pure: what to write on each Node.

For every node: the heartbeat check (:mod:`.health`) first, then the taints (:mod:`.taints`) on
the node *as it will be* after that check, with the zone states of all nodes after it, so a node
that goes silent gets ``Ready=Unknown`` and its ``unreachable`` taints in one decision — one
atomic append on its subject (``NodeHeartbeatLost`` + ``NodeUntainted`` + ``NodeTainted``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from msgspec.structs import replace

from draflow.events.api.coordination_v1 import Lease
from draflow.events.api.core_v1 import Node
from draflow.events.envelope import Event
from draflow.events.node import NodeHeartbeatLost, NodeTainted, NodeUntainted
from draflow.projections.node import set_node_condition
from draflow.services.node_lifecycle.config import LifecycleConfig, micro_time
from draflow.services.node_lifecycle.health import HeartbeatLost, check_heartbeat, condition, zone_states
from draflow.services.node_lifecycle.taints import TaintChange, taint_change

__all__ = ["NodeDecision", "decide_nodes", "node_events"]


@dataclass(frozen=True)
class NodeDecision:
    node_name: str
    lost: HeartbeatLost | None
    taints: TaintChange | None
    became_not_ready: bool  # Ready was True and this pass made it Unknown: a NodeNotReady Event


def _with_conditions(node: Node, lost: HeartbeatLost | None) -> Node:
    if lost is None:
        return node
    conditions = node.status.conditions
    for cond in lost.conditions:
        conditions = set_node_condition(conditions, cond)
    return replace(node, status=replace(node.status, conditions=conditions))


def decide_nodes(
    nodes: Iterable[Node],
    leases: Mapping[str, Lease],
    now: datetime,
    cfg: LifecycleConfig,
    since: datetime | None = None,
) -> list[NodeDecision]:
    """Decisions for the nodes that need a write, in name order (``leases`` by node name)."""
    checked = []
    for node in sorted(nodes, key=lambda n: n.metadata.name):
        lost = check_heartbeat(node, leases.get(node.metadata.name), now, cfg, since)
        checked.append((node, lost, _with_conditions(node, lost)))
    zones = zone_states((after for _, _, after in checked), cfg)
    out = []
    for before, lost, after in checked:
        change = taint_change(after, zones, now, cfg)
        if lost is None and change is None:
            continue
        was = condition(before, "Ready")
        became = lost is not None and was is not None and was.status == "True"
        out.append(NodeDecision(before.metadata.name, lost, change, became))
    return out


def node_events(decision: NodeDecision, now: datetime, observed_seq: int = 0) -> list[Event]:
    """The facts of one decision taken at ``now`` on the log up to ``observed_seq``, in the order
    they apply (one atomic append)."""
    out: list[Event] = []
    at = micro_time(now)
    lost = decision.lost
    if lost is not None:
        out.append(
            NodeHeartbeatLost(
                conditions=lost.conditions,
                last_heartbeat=micro_time(lost.last_heartbeat),
                grace_period_seconds=lost.grace_period_s,
                at=at,
                observed_seq=observed_seq,
            )
        )
    change = decision.taints
    if change is not None:
        if change.remove:
            out.append(
                NodeUntainted(taints=change.remove, reason=change.reason, at=at, observed_seq=observed_seq)
            )
        if change.add:
            out.append(NodeTainted(taints=change.add, reason=change.reason, at=at, observed_seq=observed_seq))
    return out
