"""The kubelet's RUN step: report what the simulated containers of a Running pod did.

:func:`draflow.services.kubelet.containers.advance` decides; this shell appends the result to the pod in
one atomic batch — ``PodContainerStatusesReported`` (with ``at``, so the Ready conditions follow)
and, when the pod is done, ``PodSucceeded`` / ``PodFailed`` (which makes the pod RELEASE: its
claims are unprepared and unreserved, and its generated claims deleted by the claim controller) —
records a ``BackOff`` Warning for a container that went into CrashLoopBackOff, and asks for a pass
when the next exit or restart is due (a timer per pod, no polling).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from draflow.events.api.core_v1 import Pod
from draflow.events.dra import PodFailed, PodSucceeded
from draflow.events.envelope import Event
from draflow.events.node import PodContainerStatusesReported
from draflow.services.kubelet.containers import BACKOFF_BASE_S, BACKOFF_MAX_S, advance, pod_label
from draflow.services.kubelet.node import rfc3339
from draflow.services.runtime.controller import Runtime

__all__ = ["ContainerRunner"]

log = logging.getLogger(__name__)


class ContainerRunner:
    def __init__(
        self,
        rt: Runtime,
        node_name: str,
        *,
        backoff_base_s: float = BACKOFF_BASE_S,
        backoff_max_s: float = BACKOFF_MAX_S,
        component: str = "kubelet",
    ) -> None:
        self.rt = rt
        self.node_name = node_name
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.component = component
        self._wakeups: dict[str, tuple[datetime, asyncio.TimerHandle]] = {}  # pod uid -> next pass

    async def run(self, pod: Pod) -> None:
        """Advance ``pod``'s containers to now; append what changed."""
        now = datetime.now(UTC)
        result = advance(pod, now, backoff_base_s=self.backoff_base_s, backoff_max_s=self.backoff_max_s)
        self._wake_at(pod.metadata.uid, result.next_at, now)
        if not result.changed:
            return
        meta = pod.metadata
        stamp = rfc3339(now)
        facts: list[Event] = [
            PodContainerStatusesReported(
                container_statuses=result.container_statuses,
                init_container_statuses=tuple(pod.status.init_container_statuses),
                at=stamp,
            )
        ]
        if result.phase == "Succeeded":
            facts.append(PodSucceeded(at=stamp))
        elif result.phase == "Failed":
            facts.append(PodFailed(reason="", message="", at=stamp))
        async with self.rt.step("Pod", meta.namespace, meta.name, "kubelet run pod"):
            if not await self.rt.append("Pod", meta.namespace, meta.name, facts):
                return  # the pod moved meanwhile: the next pass decides again
            for container in result.backoffs:
                await self.rt.record_event(
                    "Pod",
                    meta.namespace,
                    meta.name,
                    "Warning",
                    "BackOff",
                    f"Back-off restarting failed container {container} in pod {pod_label(pod)}",
                    host=self.node_name,
                    component=self.component,
                )
        if result.phase in ("Succeeded", "Failed"):
            self.forget(meta.uid)

    def _wake_at(self, uid: str, at: datetime | None, now: datetime) -> None:
        if at is None:
            return
        pending = self._wakeups.get(uid)
        if pending is not None and pending[0] <= at and not pending[1].cancelled():
            return
        if pending is not None:
            pending[1].cancel()
        # a hair late, so that the pass sees the due time as past
        delay = max((at - now).total_seconds(), 0.0) + 0.01
        handle = asyncio.get_running_loop().call_later(delay, self._due, uid)
        self._wakeups[uid] = (at, handle)

    def _due(self, uid: str) -> None:
        self._wakeups.pop(uid, None)
        self.rt.kick()

    def forget(self, uid: str) -> None:
        pending = self._wakeups.pop(uid, None)
        if pending is not None:
            pending[1].cancel()
