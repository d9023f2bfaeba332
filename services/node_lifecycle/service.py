"""The node lifecycle service: level-triggered passes of the three pure deciders over the cache.

Each pass reads the clock once (``now``) and:

1. **node health and taints** (``decide_nodes``): per node one atomic append on its subject
   (``NodeHeartbeatLost`` + ``NodeUntainted`` + ``NodeTainted``) at the version the decision saw
   (a conflict: decide again next pass), and a Normal Event ``NodeNotReady`` (``Node <n> status is
   now: NodeNotReady``, from ``node-controller``) when it turned a Ready node Unknown;
2. **taint eviction** (``plan_evictions``) on the nodes as now stored: a pod due is marked
   (``PodDisruptionTargeted``), a ``TaintManagerEviction`` Event is recorded (from
   ``taint-eviction-controller``) and the pod is deleted through the apiserver (graceful: its
   kubelet confirms); a scheduled eviction that is no longer needed (the taints went, the pod
   tolerates them now) gets upstream's ``Cancelling deletion of Pod <ns>/<name>`` Event;
3. **pod GC** (``collect_pods``): pods on out-of-service or deleted nodes are marked Failed (and
   ``DisruptionTarget`` for orphans) in one append, then deleted with grace period 0.

Passes run after every Node or Pod change, every ``--node-monitor-period`` (the heartbeat check:
Lease renewals do not wake the loop, they only move the deadline) and when the earliest scheduled
eviction or quarantined orphan falls due. The decisions carry ``now`` (``at``), so replaying the
log shows when and on what each was taken.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from events.api.coordination_v1 import NODE_LEASE_NAMESPACE
from events.api.core_v1 import Pod
from events.dra import PodFailed
from events.envelope import Event
from events.node import PodDisruptionTargeted
from services.dra.resourceclaim import is_pod_terminal
from services.node_lifecycle.config import LifecycleConfig, micro_time, rfc3339
from services.node_lifecycle.controller import decide_nodes, node_events
from services.node_lifecycle.eviction import (
    EVICTION_EVENT_REASON,
    EVICTION_MESSAGE,
    EVICTION_REASON,
    Eviction,
    plan_evictions,
)
from services.node_lifecycle.podgc import ForceDelete, collect_pods
from services.runtime.controller import Runtime

__all__ = ["ACTOR", "NODE_CONTROLLER", "TAINT_EVICTION_CONTROLLER", "NodeLifecycleService"]

log = logging.getLogger(__name__)

ACTOR = "node-lifecycle-controller"
NODE_CONTROLLER = "node-controller"  # upstream's event source names
TAINT_EVICTION_CONTROLLER = "taint-eviction-controller"
KINDS = frozenset({"Node", "Pod"})

Key = tuple[str, str]


def _disruption_target(pod: Pod) -> bool:
    return any(c.type == "DisruptionTarget" and c.status == "True" for c in pod.status.conditions)


class NodeLifecycleService:
    def __init__(
        self, rt: Runtime, cfg: LifecycleConfig | None = None, *, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.rt = rt
        rt.kinds = KINDS
        self.cfg = cfg or LifecycleConfig()
        self.clock = clock or (lambda: datetime.now(UTC))
        # every node gets a full grace period from our start (upstream's probe times start at "now")
        self.since = self.clock()
        self._pending: dict[Key, str] = {}  # pods with an eviction scheduled last pass -> uid
        self._wake: asyncio.TimerHandle | None = None

    async def sync(self) -> None:
        now = self.clock()
        await self._nodes(now)
        due = [await self._evictions(now), await self._gc(now)]
        self._arm(min((d for d in due if d is not None), default=None))

    def _arm(self, when: datetime | None) -> None:
        """Wake the loop when the next timed decision falls due."""
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        if when is not None:
            delay = max((when - self.clock()).total_seconds(), 0.0) + 0.01
            self._wake = asyncio.get_running_loop().call_later(delay, self.rt.kick)

    # -- 1. health and taints -------------------------------------------------------------------

    async def _nodes(self, now: datetime) -> None:
        rt = self.rt
        observed = rt.cache.position  # what the decisions below are taken on (recorded with them)
        leases = {lease.metadata.name: lease for lease in rt.items("Lease", NODE_LEASE_NAMESPACE)}
        for decision in decide_nodes(rt.items("Node"), leases, now, self.cfg, self.since):
            name = decision.node_name
            if not await rt.append("Node", "", name, node_events(decision, now, observed)):
                continue
            if decision.lost is not None:
                log.info(
                    "node %s: no heartbeat since %s (grace %gs): Ready=Unknown",
                    name,
                    micro_time(decision.lost.last_heartbeat),
                    decision.lost.grace_period_s,
                )
            if decision.taints is not None:
                log.info(
                    "node %s: taints +%s -%s (%s)",
                    name,
                    [f"{t.key}:{t.effect}" for t in decision.taints.add],
                    [f"{t.key}:{t.effect}" for t in decision.taints.remove],
                    decision.taints.reason,
                )
            if decision.became_not_ready:
                await rt.record_event(
                    "Node",
                    "",
                    name,
                    "Normal",
                    "NodeNotReady",
                    f"Node {name} status is now: NodeNotReady",
                    component=NODE_CONTROLLER,
                )

    # -- 2. taint eviction ----------------------------------------------------------------------

    async def _evictions(self, now: datetime) -> datetime | None:
        rt = self.rt
        by_node: dict[str, list[Pod]] = {}
        for pod in rt.items("Pod"):
            if pod.spec.node_name:
                by_node.setdefault(pod.spec.node_name, []).append(pod)
        scheduled: dict[Key, datetime] = {}
        evicted: set[Key] = set()
        observed = rt.cache.position
        for node in rt.items("Node"):
            plan = plan_evictions(node, by_node.get(node.metadata.name, []), now)
            scheduled.update(plan.scheduled)
            for ev in plan.due:
                evicted.add((ev.namespace, ev.name))
                await self._evict(ev, now, observed)
        for key, uid in self._pending.items():
            if key in scheduled or key in evicted:
                continue
            pod = rt.get("Pod", *key)
            if pod is None or pod.metadata.uid != uid or pod.metadata.deletion_timestamp is not None:
                continue
            await rt.record_event(
                "Pod",
                key[0],
                key[1],
                "Normal",
                EVICTION_EVENT_REASON,
                f"Cancelling deletion of Pod {key[0]}/{key[1]}",
                component=TAINT_EVICTION_CONTROLLER,
            )
        pending = {}
        for key in scheduled:
            pod = rt.get("Pod", *key)
            if pod is not None:
                pending[key] = pod.metadata.uid
        self._pending = pending
        return min(scheduled.values(), default=None)

    async def _evict(self, ev: Eviction, now: datetime, observed: int) -> None:
        rt = self.rt
        pod = rt.get("Pod", ev.namespace, ev.name)
        if pod is None or pod.metadata.uid != ev.uid or pod.metadata.deletion_timestamp is not None:
            return
        if not _disruption_target(pod):
            marked = PodDisruptionTargeted(
                reason=EVICTION_REASON, message=EVICTION_MESSAGE, at=micro_time(now), observed_seq=observed
            )
            if not await rt.append("Pod", ev.namespace, ev.name, [marked]):
                return  # changed meanwhile: the next pass decides again
        log.info("evicting pod %s/%s from node %s (due %s)", ev.namespace, ev.name, ev.node_name, ev.due)
        await rt.record_event(
            "Pod",
            ev.namespace,
            ev.name,
            "Normal",
            EVICTION_EVENT_REASON,
            f"Marking for deletion Pod {ev.namespace}/{ev.name}",
            component=TAINT_EVICTION_CONTROLLER,
        )
        await rt.delete("Pod", ev.namespace, ev.name, uid=ev.uid)

    # -- 3. pod GC ------------------------------------------------------------------------------

    async def _gc(self, now: datetime) -> datetime | None:
        observed = self.rt.cache.position
        nodes = {n.metadata.name: n for n in self.rt.items("Node")}
        plan = collect_pods(self.rt.items("Pod"), nodes, now, self.cfg.orphan_quarantine_s)
        for fd in plan.deletes:
            await self._force_delete(fd, now, observed)
        return plan.next_due

    async def _force_delete(self, fd: ForceDelete, now: datetime, observed: int) -> None:
        rt = self.rt
        pod = rt.get("Pod", fd.namespace, fd.name)
        if pod is None or pod.metadata.uid != fd.uid:
            return
        facts: list[Event] = []
        if fd.condition is not None and not _disruption_target(pod):
            reason, message = fd.condition
            at = micro_time(now)
            facts.append(PodDisruptionTargeted(reason=reason, message=message, at=at, observed_seq=observed))
        if fd.mark_failed and not is_pod_terminal(pod):
            facts.append(PodFailed(reason=pod.status.reason, message=pod.status.message, at=rfc3339(now)))
        if facts and not await rt.append("Pod", fd.namespace, fd.name, facts):
            return
        log.info("pod GC: force-deleting pod %s/%s (node %s %s)", fd.namespace, fd.name, fd.node_name, fd.why)
        await rt.delete("Pod", fd.namespace, fd.name, uid=fd.uid, grace_period_seconds=0)
