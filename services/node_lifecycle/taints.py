"""The taints the node lifecycle controller keeps on a node, pure.

After upstream ``doNoScheduleTaintingPass`` and ``processTaintBaseEviction`` /
``doNoExecuteTaintingPass`` / ``markNodeAsReachable`` (``pkg/controller/nodelifecycle``):

* **NoSchedule** mirrors the conditions (TaintNodesByCondition): Ready=False → ``not-ready``,
  Ready=Unknown → ``unreachable``, MemoryPressure / DiskPressure / PIDPressure /
  NetworkUnavailable = True → ``memory-pressure`` / ``disk-pressure`` / ``pid-pressure`` /
  ``network-unavailable``, ``spec.unschedulable`` → ``unschedulable``. Other NoSchedule taints are
  not the controller's and are left alone.
* **NoExecute** (taint-based eviction): Ready=False → ``not-ready``, Unknown → ``unreachable`` (the
  two are swapped at once when the status flips), Ready=True → both removed. While every zone is
  fully disrupted (no Ready node anywhere: the control plane is more likely cut off than every
  node dead) no NoExecute taint is added and those present are removed; a partially disrupted
  zone of at most ``large_cluster_threshold`` nodes gets no new ones (upstream's eviction rate 0).

Added taints carry ``timeAdded`` = the decision time (``SwapNodeControllerTaint``). Deviation:
upstream adds NoExecute taints through a per-zone rate limiter (``--node-eviction-rate`` 0.1
nodes/s, ``--secondary-node-eviction-rate``); here they are added at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from draflow.events.api.core_v1 import Node, Taint
from draflow.services.node_lifecycle.config import LifecycleConfig, rfc3339
from draflow.services.node_lifecycle.health import (
    FULL_DISRUPTION,
    PARTIAL_DISRUPTION,
    ZoneState,
    condition,
    zone_key,
)

__all__ = [
    "NOT_READY",
    "NO_EXECUTE",
    "NO_SCHEDULE",
    "OUT_OF_SERVICE",
    "UNREACHABLE",
    "UNSCHEDULABLE",
    "TaintChange",
    "evictions_stopped",
    "taint_change",
]

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"

# (condition type, status) -> taint key
_CONDITION_TAINTS: dict[tuple[str, str], str] = {
    ("Ready", "False"): NOT_READY,
    ("Ready", "Unknown"): UNREACHABLE,
    ("MemoryPressure", "True"): "node.kubernetes.io/memory-pressure",
    ("DiskPressure", "True"): "node.kubernetes.io/disk-pressure",
    ("NetworkUnavailable", "True"): "node.kubernetes.io/network-unavailable",
    ("PIDPressure", "True"): "node.kubernetes.io/pid-pressure",
}
_CONTROLLED_NO_SCHEDULE = frozenset({*_CONDITION_TAINTS.values(), UNSCHEDULABLE})
_CONTROLLED_NO_EXECUTE = frozenset({NOT_READY, UNREACHABLE})


@dataclass(frozen=True)
class TaintChange:
    """Taints to add and to remove on one node (one update, as ``SwapNodeControllerTaint``)."""

    node_name: str
    add: tuple[Taint, ...]
    remove: tuple[Taint, ...]
    reason: str


def evictions_stopped(zones: Mapping[str, ZoneState]) -> bool:
    """Every zone fully disrupted: upstream's "master disruption mode" (no taint-based eviction)."""
    return bool(zones) and all(z.state == FULL_DISRUPTION for z in zones.values())


def _no_schedule_keys(node: Node) -> list[tuple[str, str]]:
    """(taint key, why) the conditions and spec.unschedulable ask for, in condition order."""
    out = []
    for c in node.status.conditions:
        key = _CONDITION_TAINTS.get((c.type, c.status))
        if key is not None:
            out.append((key, f"{c.type}={c.status}"))
    if node.spec.unschedulable:
        out.append((UNSCHEDULABLE, "Unschedulable"))
    return out


def _no_execute_key(
    node: Node, have: set[str], zones: Mapping[str, ZoneState], cfg: LifecycleConfig
) -> tuple[str | None, str]:
    """The NoExecute taint the node should carry (None: none of the two) and why."""
    if evictions_stopped(zones):
        return None, "AllNodesNotReady"
    ready = condition(node, "Ready")
    if ready is None:
        return (next(iter(sorted(have))) if have else None), ""  # upstream waits for a condition
    if ready.status == "True":
        return None, "Ready=True"
    want = NOT_READY if ready.status == "False" else UNREACHABLE
    why = f"Ready={ready.status}"
    if want in have or have:  # present, or the opposite one: swapped at once
        return want, why
    zone = zones.get(zone_key(node))
    if zone is not None and zone.state == PARTIAL_DISRUPTION and zone.size <= cfg.large_cluster_threshold:
        return None, why  # no new taint while the zone is partially disrupted
    return want, why


def taint_change(
    node: Node, zones: Mapping[str, ZoneState], now: datetime, cfg: LifecycleConfig
) -> TaintChange | None:
    """The controller's taint update for ``node`` (already carrying this pass's conditions)."""
    stamp = rfc3339(now)
    present = {(t.key, t.effect): t for t in node.spec.taints}
    add: list[Taint] = []
    remove: list[Taint] = []
    reasons: list[str] = []
    wanted_ns = dict(_no_schedule_keys(node))
    for key, why in wanted_ns.items():
        if (key, NO_SCHEDULE) not in present:
            add.append(Taint(key=key, effect=NO_SCHEDULE, time_added=stamp))
            reasons.append(why)
    for (key, effect), taint in present.items():
        if effect == NO_SCHEDULE and key in _CONTROLLED_NO_SCHEDULE and key not in wanted_ns:
            remove.append(taint)
    have = {key for key, effect in present if effect == NO_EXECUTE and key in _CONTROLLED_NO_EXECUTE}
    want, why = _no_execute_key(node, have, zones, cfg)
    if want is not None and want not in have:
        add.append(Taint(key=want, effect=NO_EXECUTE, time_added=stamp))
        reasons.append(why)
    for key in sorted(have - ({want} if want else set())):
        remove.append(present[(key, NO_EXECUTE)])
        if why and not want:
            reasons.append(why)
    if not add and not remove:
        return None
    reason = ", ".join(dict.fromkeys(r for r in reasons if r)) or "NodeConditionsChanged"
    return TaintChange(node.metadata.name, tuple(add), tuple(remove), reason)
