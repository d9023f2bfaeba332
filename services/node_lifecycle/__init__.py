"""The node lifecycle controller: silent kubelets, taint-based eviction and pod GC for lost nodes.

Pure deciders (no I/O, no clock: ``now`` is a parameter): :mod:`.health` (heartbeats, zone
states), :mod:`.taints` (the controller's node taints), :mod:`.controller` (one pass over the
nodes), :mod:`.eviction` (taint eviction), :mod:`.podgc` (force-deleting what no kubelet will
finish). :mod:`.service` is the shell, ``python -m draflow.services.node_lifecycle`` runs it.
"""

from __future__ import annotations

from draflow.services.node_lifecycle.config import LifecycleConfig, parse_duration
from draflow.services.node_lifecycle.controller import NodeDecision, decide_nodes, node_events
from draflow.services.node_lifecycle.eviction import Eviction, EvictionPlan, plan_evictions
from draflow.services.node_lifecycle.health import HeartbeatLost, check_heartbeat, zone_states
from draflow.services.node_lifecycle.podgc import ForceDelete, GcPlan, collect_pods
from draflow.services.node_lifecycle.taints import TaintChange, taint_change

__all__ = [
    "Eviction",
    "EvictionPlan",
    "ForceDelete",
    "GcPlan",
    "HeartbeatLost",
    "LifecycleConfig",
    "NodeDecision",
    "TaintChange",
    "check_heartbeat",
    "collect_pods",
    "decide_nodes",
    "node_events",
    "parse_duration",
    "plan_evictions",
    "taint_change",
    "zone_states",
]
