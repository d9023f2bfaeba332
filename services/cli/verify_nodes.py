"""``verify-replay`` for the node lifecycle controller's timed decisions (pure, no I/O).

Each decision event records when it was taken (``at``) and on which log position
(``observed_seq``); the verifier folds the log up to that position and asks today's deciders again
with ``now = at``:

* ``NodeHeartbeatLost``: ``check_heartbeat`` on the node and its Lease, with the recorded grace
  period, must find the heartbeat lost and set the same conditions;
* ``PodDisruptionTargeted`` ``DeletionByTaintManager``: ``plan_evictions`` on the pod's node must
  have the pod due;
* ``PodDisruptionTargeted`` ``DeletionByPodGC``: the pod's node must be gone.

Taint changes are not re-checked: they depend on every node's state in the same pass (zone
disruption), which one event does not carry.
"""

from __future__ import annotations

from typing import Any

import msgspec

from draflow.events.api.core_v1 import Node, Pod
from draflow.events.envelope import Envelope, Event
from draflow.events.node import NodeHeartbeatLost, PodDisruptionTargeted
from draflow.projections.objects import ObjectIndex
from draflow.services.node_lifecycle.config import LifecycleConfig, parse_time
from draflow.services.node_lifecycle.eviction import EVICTION_REASON, plan_evictions
from draflow.services.node_lifecycle.health import check_heartbeat
from draflow.services.node_lifecycle.podgc import ORPHAN_REASON

__all__ = ["FOLDED_KINDS", "check_node_decision", "node_decision_position"]

FOLDED_KINDS = frozenset({"Node", "Lease", "Pod"})  # what these checks read


def node_decision_position(env: Envelope[Event], seq: int) -> int | None:
    """Where to re-decide a node lifecycle decision (None: not one of them)."""
    d = env.data
    if isinstance(d, NodeHeartbeatLost) or (
        isinstance(d, PodDisruptionTargeted) and d.reason in (EVICTION_REASON, ORPHAN_REASON)
    ):
        return d.observed_seq or seq - 1
    return None


def _json(x: Any) -> Any:
    return msgspec.json.decode(msgspec.json.encode(x))


def check_node_decision(
    objects: ObjectIndex, env: Envelope[Event], namespace: str, name: str
) -> tuple[str, Any, Any] | None:
    """(what, expected, actual) when today's code decides differently on the folded ``objects``."""
    d = env.data
    now = parse_time(getattr(d, "at", ""))
    if isinstance(d, NodeHeartbeatLost):
        what = f"NodeHeartbeatLost for node {name}"
        node = objects.get("Node", "", name)
        if not isinstance(node, Node) or now is None:
            return what, {"conditions": _json(d.conditions)}, {"error": "no node or no decision time"}
        grace = d.grace_period_seconds
        cfg = LifecycleConfig(grace_period_s=grace, startup_grace_period_s=grace)
        lost = check_heartbeat(node, objects.get("Lease", "kube-node-lease", name), now, cfg)  # type: ignore[arg-type]
        actual = {"conditions": _json(lost.conditions)} if lost is not None else {"heartbeat": "not lost"}
        expected = {"conditions": _json(d.conditions)}
        return None if actual == expected else (what, expected, actual)
    assert isinstance(d, PodDisruptionTargeted)
    what = f"PodDisruptionTargeted ({d.reason}) for pod {namespace}/{name}"
    pod = objects.get("Pod", namespace, name)
    if not isinstance(pod, Pod) or now is None:
        return what, {"evict": True}, {"error": "no pod or no decision time"}
    node_name = pod.spec.node_name
    node = objects.get("Node", "", node_name) if node_name else None
    if d.reason == ORPHAN_REASON:
        ok = bool(node_name) and node is None
        return None if ok else (what, {"node gone": node_name}, {"node present": node_name or "<unbound>"})
    if not isinstance(node, Node):
        return what, {"evict": True}, {"error": f"node {node_name!r} not in the log at that position"}
    plan = plan_evictions(node, [pod], now)
    if any(e.name == name and e.namespace == namespace for e in plan.due):
        return None
    due = plan.scheduled.get((namespace, name))
    return what, {"evict": True}, {"evict": False, "due": due.isoformat() if due else None}
