"""The kubelet's heartbeat shell: renew the node Lease, and post Ready again when the node is not.

Runs beside the pod loop (its own task, as upstream's lease controller is its own goroutine), so a
slow prepare never delays a renewal. Every ``renew_interval`` (a quarter of the lease duration):

* the Lease is created (through the apiserver) if missing, rewritten if its holder, duration or
  owner is wrong, and otherwise renewed with one ``LeaseRenewed`` fact at the version we hold (a
  conflict is retried once at the new version, then on the next beat);
* if the Node's Ready condition is not True (the node lifecycle controller marked it Unknown while
  we were gone, or slow) the kubelet posts its healthy conditions again, as upstream's status
  loop does, and records ``NodeReady`` (``Node <n> status is now: NodeReady``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

from draflow.events.api.coordination_v1 import NODE_LEASE_NAMESPACE, micro_time
from draflow.events.node import LeaseRenewed
from draflow.services.kubelet.lease import lease_object, lease_outdated, renew_interval
from draflow.services.kubelet.node import is_ready, ready_status
from draflow.services.runtime.controller import Runtime

__all__ = ["NodeHeartbeat"]

log = logging.getLogger(__name__)


class NodeHeartbeat:
    def __init__(self, rt: Runtime, node_name: str, duration_s: int) -> None:
        self.rt = rt
        self.node_name = node_name
        self.duration_s = duration_s
        self.interval_s = renew_interval(duration_s)
        self.renewals = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.beat()
            except asyncio.CancelledError:
                raise
            except Exception:  # the apiserver or the bus is away: try again next beat
                log.exception("kubelet %s: heartbeat failed", self.node_name)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval_s):
                    await stop.wait()

    async def beat(self) -> None:
        now = datetime.now(UTC)
        await self._renew(now)
        await self._post_ready(now)

    async def _renew(self, now: datetime) -> None:
        rt, name = self.rt, self.node_name
        node = rt.get("Node", "", name)
        uid = node.metadata.uid if node is not None else ""
        lease = rt.get("Lease", NODE_LEASE_NAMESPACE, name)
        if lease is None:
            await rt.create(lease_object(name, now, self.duration_s, uid))
            return
        if lease_outdated(lease, name, self.duration_s, uid):
            await rt.apply(lease_object(name, now, self.duration_s, uid))
            return
        renewed = [LeaseRenewed(renew_time=micro_time(now))]
        if await rt.append("Lease", NODE_LEASE_NAMESPACE, name, renewed) or await rt.append(
            "Lease", NODE_LEASE_NAMESPACE, name, renewed
        ):
            self.renewals += 1

    async def _post_ready(self, now: datetime) -> None:
        rt, name = self.rt, self.node_name
        node = rt.get("Node", "", name)
        if node is None or is_ready(node):
            return
        if await rt.update_status(node, ready_status(node, now)):
            log.info("kubelet %s: node was not Ready; posted Ready again", name)
            await rt.record_event(
                "Node",
                "",
                name,
                "Normal",
                "NodeReady",
                f"Node {name} status is now: NodeReady",
                host=name,
                component="kubelet",
            )
