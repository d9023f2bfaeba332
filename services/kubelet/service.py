"""The kubelet service for one node: level-triggered passes of ``next_step`` over the pods in the cache.

What a pass does (every pod, after every change of a Pod / ResourceClaim, and on a timer):

* **START** (bound here, Pending): ``admit`` (are the claims there, created for the pod,
  reserved for it, allocated, their drivers registered?), then the claims are prepared through
  the node's driver plugins (``prepare_pod``: batched per driver, idempotent, bounded retries
  inside the call), the DRA manager is checkpointed, and ``PodResourcesPrepared`` (the CDI ids
  per container) + ``PodStarted`` + ``PodContainerStatusesReported`` are appended to the pod in
  **one** atomic batch. A refusal or a failed prepare is upstream's failed
  ``PrepareDynamicResources``: a Warning Event (``FailedPrepareDynamicResources``, ``Failed to
  prepare dynamic resources: <why>``), the pod stays **Pending** and is tried again after a
  backoff (``draflow.services.kubelet.backoff``: 0.5 s doubling, at most upstream's 10 s), for as long as
  it is bound here; once its claims are ready it starts. Deleting it releases whatever was
  prepared. On a ``--device-plugin`` node the plugin's devices are assigned first
  (``draflow.services.kubelet.devices``); too few is a kubelet admission failure, which does fail the pod
  (``UnexpectedAdmissionError``), as upstream.
* **RUN** (Running here): a claim of the pod that is no longer allocated or reserved for it is a
  broken invariant (``draflow.services.dra.invariants``): an ``InvariantBroken`` Warning Event,
  once per claim and cause. Then the simulated container runtime (``draflow.services.kubelet.containers``,
  shell ``draflow.services.kubelet.running``): containers exit after their program's run time, restart
  by ``restartPolicy`` with the crash-loop back-off, and the pod ends Succeeded or Failed as the
  kubelet's ``getPhase`` says; a timer wakes the pass when the next exit or restart is due.
* **RELEASE** (deleted, terminal or moved while claims or devices are held): unprepare, free the
  device-plugin devices, checkpoint, then drop
  the pod from the claims' ``reservedFor`` (and deallocate a claim whose last consumer it was) —
  one atomic batch per claim.
* **FINISH_DELETION** (deleted, nothing held): make sure no claim still lists the pod, then confirm
  the deletion (delete with grace period 0).

The checkpoint is the kubelet's only local state: at start the manager is rebuilt from it and
the claims of pods that vanished meanwhile are unprepared. A corrupt checkpoint stops the kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from draflow.events.api.core_v1 import Pod
from draflow.events.dra import ContainerCDIDevices, PodFailed, PodResourcesPrepared, PodStarted
from draflow.events.node import PodContainerStatusesReported
from draflow.services.dra.invariants import pod_claim_findings
from draflow.services.kubelet import devices as device_plugin
from draflow.services.kubelet.admission import FAILED_PREPARE, Reject, admit, release_reservations
from draflow.services.kubelet.backoff import DEFAULT_BASE_S, DEFAULT_MAX_S, PrepareBackoff
from draflow.services.kubelet.checkpoint import read_checkpoint, write_checkpoint
from draflow.services.kubelet.containers import BACKOFF_BASE_S
from draflow.services.kubelet.devicehealth import (
    HealthCache,
    allocated_resources_status,
    health_statuses,
    with_resource_statuses,
)
from draflow.services.kubelet.manager import DRAManager
from draflow.services.kubelet.node import is_ready, node_object, rfc3339, running_status
from draflow.services.kubelet.numeric_capacity import publish as publish_capacity
from draflow.services.kubelet.plugins.capacity import CapacityWatcher
from draflow.services.kubelet.prepare import prepare_pod, unprepare_pod
from draflow.services.kubelet.running import ContainerRunner
from draflow.services.kubelet.sync import Step, next_step, vanished_pods
from draflow.services.runtime.claimwrites import execute
from draflow.services.runtime.controller import Runtime

if TYPE_CHECKING:
    from draflow.services.kubelet.classic_host import ClassicKubelet

__all__ = ["KubeletService"]

log = logging.getLogger(__name__)

KINDS = frozenset({"Pod", "ResourceClaim"})
INVARIANT_BROKEN = "InvariantBroken"  # the Warning a service records when it notices a broken DRA invariant
COMPONENT = "kubelet"  # the source of the kubelet's Events (upstream: component kubelet, host the node)


def _now() -> str:
    return rfc3339(datetime.now(UTC))


def container_statuses(pod: Pod, now: datetime) -> PodContainerStatusesReported:
    """The containers as the kubelet starts them: init containers completed, the others running."""
    stamp = rfc3339(now)
    init = tuple(
        {
            "name": c.name,
            "image": c.image,
            "ready": True,
            "restartCount": 0,
            "state": {
                "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": stamp, "finishedAt": stamp}
            },
        }
        for c in pod.spec.init_containers
    )
    running = running_status(pod, now).container_statuses
    return PodContainerStatusesReported(container_statuses=tuple(running), init_container_statuses=init)


class KubeletService:
    def __init__(
        self,
        rt: Runtime,
        node_name: str,
        state_dir: Path,
        plugins: Mapping[str, Any],
        *,
        node_labels: Mapping[str, str] | None = None,
        retry_base_s: float = DEFAULT_BASE_S,
        retry_max_s: float = DEFAULT_MAX_S,
        classic: ClassicKubelet | None = None,
        capacity: Mapping[str, str] | None = None,
        devices: device_plugin.DeviceManager | None = None,
        crash_loop_backoff_s: float = BACKOFF_BASE_S,
        health: HealthCache | None = None,
        numeric: CapacityWatcher | None = None,
    ) -> None:
        self.rt = rt
        rt.kinds = KINDS
        # KEP-3063 Pods (classic claims) go to the classic drivers' node plugins instead
        self.classic = classic
        if classic is not None:
            rt.kinds = KINDS | {"ClassicResourceClaim", "Node"}
        self.node_name = node_name
        self.state_dir = state_dir
        # driver -> its plugin: a live registry of registered plugins (draflow.services.kubelet.plugins)
        # in the kubelet process, or plugin objects handed in by tests
        self.plugins = plugins
        self.node_labels = dict(node_labels or {})
        self.capacity = dict(capacity) if capacity else None  # None: the default capacity
        self.retry_base_s = retry_base_s
        self.manager = DRAManager(read_checkpoint(state_dir))  # CorruptCheckpointError stops us
        # pods whose resources could not be prepared: when to try again
        self.backoff = PrepareBackoff(retry_base_s, retry_max_s)
        # the simulated container runtime of Running pods (exits, restarts, back-off)
        self.runner = ContainerRunner(rt, node_name, backoff_base_s=crash_loop_backoff_s, component=COMPONENT)
        # device-plugin devices (--device-plugin), assigned at admission, checkpointed
        self.devices = devices
        # told after every checkpoint, i.e. every change of local state (the PodResources API drops
        # its cached answers; changes of pods it learns from the cache)
        self.on_state_change: Callable[[], None] | None = None
        # (pod uid, claim, message) already reported by _notice_lost_claims
        self._warned: set[tuple[str, ...]] = set()
        # the devices' health the plugins stream (plugins.health): shown in Running pods' statuses
        self.health = health
        self._health_changed = False
        # KEP-4381: the capacity the plugins stream (plugins.capacity), published by the passes
        self.numeric = numeric

    async def register(self, *, retry_s: float = 0.5, attempts: int = 40) -> None:
        """Create or refresh this node's Node object (its status is the kubelet's). An existing
        Node keeps its spec (taints, cordon: not the kubelet's to undo, as upstream); a Node that
        was not Ready (its kubelet was gone) gets a ``NodeReady`` Event.

        The Node must then be in the log the kubelet follows: an apiserver that has not noticed a
        stream reset yet answers an unchanged apply from its old state and appends nothing. Then
        the kubelet registers again (``attempts`` times, ``retry_s`` apart) until the apiserver of
        the new log has it."""
        for _ in range(attempts):
            await self._register_once()
            if self.rt.get("Node", "", self.node_name) is not None:
                return
            log.warning(
                "%s: the apiserver accepted the Node but the log does not have it (an apiserver still "
                "on a reset stream?); registering again",
                self.node_name,
            )
            await asyncio.sleep(retry_s)
            await self.rt.wait_for_apiserver()
        raise RuntimeError(f"cannot register Node {self.node_name}: it never reached the log")

    async def _register_once(self) -> None:
        node = node_object(self.node_name, datetime.now(UTC), labels=self.node_labels, capacity=self.capacity)
        existing = self.rt.get("Node", "", self.node_name)
        if existing is not None:
            node = msgspec.structs.replace(node, spec=existing.spec)
        if not await self.rt.apply(node):
            raise RuntimeError(f"cannot register Node {self.node_name}")
        current = self.rt.get("Node", "", self.node_name)
        if current is not None and current.status != node.status:
            await self.rt.update_status(current, node.status)
            if not is_ready(current):
                name = self.node_name
                await self.rt.record_event(
                    "Node",
                    "",
                    name,
                    "Normal",
                    "NodeReady",
                    f"Node {name} status is now: NodeReady",
                    host=name,
                    component=COMPONENT,
                )

    def _checkpoint(self) -> None:
        write_checkpoint(self.state_dir, self.manager.entries())
        if self.devices is not None:
            device_plugin.write_checkpoint(self.state_dir, self.devices)
        self._state_changed()

    def _state_changed(self) -> None:
        if self.on_state_change is not None:
            self.on_state_change()

    def _holds_devices(self, pod_uid: str) -> bool:
        return self.devices is not None and self.devices.holds(pod_uid)

    def health_changed(self) -> None:
        """A device's health changed: the next pass rewrites the statuses of the pods using it."""
        self._health_changed = True
        self.rt.kick()

    async def _report_health(self) -> None:
        """``allocatedResourcesStatus`` of this node's Running pods, where it is not up to date."""
        if self.health is None or not self._health_changed:
            return
        self._health_changed = False
        for pod in self.rt.items("Pod"):
            if pod.spec.node_name != self.node_name or pod.status.phase != "Running":
                continue
            statuses = health_statuses(pod, self.manager.get, self.health)
            if statuses is not None:
                reported = PodContainerStatusesReported(
                    container_statuses=statuses, init_container_statuses=pod.status.init_container_statuses
                )
                await self.rt.append("Pod", pod.metadata.namespace, pod.metadata.name, [reported])

    async def _publish_capacity(self) -> None:
        """The capacity reports that changed since they were last written, as this node's
        ``NodeResourceCapacity`` objects (one not written now is tried again next pass)."""
        if self.numeric is None:
            return
        for driver in sorted(self.numeric.pending):
            report = self.numeric.reports[driver]
            if await publish_capacity(self.rt, self.node_name, driver, report):
                self.numeric.published(driver, report)

    async def sync(self) -> None:
        await self._report_health()
        await self._publish_capacity()
        pods = self.rt.items("Pod")
        await self._unprepare_vanished(pods)
        for pod in pods:
            current = self.rt.get("Pod", pod.metadata.namespace, pod.metadata.name)
            if current is None or current.metadata.uid != pod.metadata.uid:
                continue
            held = self.classic is not None and self.classic.holds(current.metadata.uid)
            held = held or self._holds_devices(current.metadata.uid)
            step = next_step(current, self.node_name, self.manager, held=held)
            if step is Step.NOTHING or (step is Step.START and not self._due(current.metadata.uid)):
                continue
            if step is Step.RUN:  # its own span, and only when something happened
                await self._notice_lost_claims(current)
                await self.runner.run(current)
                continue
            meta = current.metadata
            async with self.rt.step("Pod", meta.namespace, meta.name, f"kubelet {step.value} pod"):
                if step is Step.START:
                    await self._start(current)
                elif step is Step.RELEASE:
                    await self._release(current)
                else:
                    await self._finish_deletion(current)

    async def _notice_lost_claims(self, pod: Pod) -> None:
        """A Running pod here whose claim is no longer allocated or reserved for it (the devices it
        uses may be handed to another pod): say so, once per claim and cause, as a Warning Event
        (``draflow check`` finds the event that did it in the log)."""
        if self.classic is not None and self.classic.handles(pod):
            return
        ns = pod.metadata.namespace
        claims = {(ns, c.metadata.name): c for c in self.rt.items("ResourceClaim", ns)}
        for finding in pod_claim_findings(pod, claims):
            key = (*finding.key, finding.message)
            if key in self._warned:
                continue
            self._warned.add(key)
            log.warning("%s: %s", self.node_name, finding.message)
            await self.rt.record_event(
                "Pod",
                ns,
                pod.metadata.name,
                "Warning",
                INVARIANT_BROKEN,
                f"{finding.rule.text}: {finding.message}",
                host=self.node_name,
                component=COMPONENT,
            )

    def _due(self, pod_uid: str) -> bool:
        """False while a failed prepare waits for its next attempt."""
        return self.backoff.due(pod_uid, time.monotonic())

    # -- steps -------------------------------------------------------------------------------

    async def _start(self, pod: Pod) -> None:
        uid = pod.metadata.uid
        ns, name = pod.metadata.namespace, pod.metadata.name
        classic = self.classic if self.classic is not None and self.classic.handles(pod) else None
        if classic is not None:
            decision = classic.admit(self.rt, pod)
        else:
            decision = admit(pod, self.rt.items("ResourceClaim", ns), registered_drivers=self.plugins.keys())
        if isinstance(decision, Reject):
            await self._retry_later(pod, decision.message)
            return
        if self.devices is not None:
            try:
                self.devices.allocate(pod)
            except device_plugin.DevicesUnavailable as exc:
                reason = "UnexpectedAdmissionError"
                await self._fail(pod, reason, str(exc), reason)
                return
        if classic is not None:
            outcome = await classic.prepare(self.rt, pod)
        else:
            outcome = await prepare_pod(self.manager, pod, decision.claims, self.plugins)
        self._checkpoint()
        if not outcome.ok:
            await self._retry_later(pod, f"Failed to prepare dynamic resources: {'; '.join(outcome.errors)}")
            return
        self.backoff.forget(uid)
        cdi = classic.cdi(self.rt, pod) if classic is not None else self.manager.pod_cdi_devices(pod)
        if self.devices is not None:  # the device plugin's CDI devices first, as the runtime gets them
            cdi = {
                c.name: [*self.devices.cdi_devices(uid, c.name), *cdi.get(c.name, ())]
                for c in (*pod.spec.init_containers, *pod.spec.containers)
                if self.devices.cdi_devices(uid, c.name) or c.name in cdi
            }
        containers = tuple(ContainerCDIDevices(container=c, cdi_ids=tuple(ids)) for c, ids in cdi.items())
        started = datetime.now(UTC)
        statuses = container_statuses(pod, started)
        if self.health is not None and classic is None:
            health = allocated_resources_status(pod, self.manager.get, self.health)
            statuses = msgspec.structs.replace(
                statuses, container_statuses=with_resource_statuses(statuses.container_statuses, health)
            )
        await self.rt.append(
            "Pod",
            ns,
            name,
            [
                PodResourcesPrepared(node_name=self.node_name, containers=containers),
                PodStarted(at=rfc3339(started), host_ip="", pod_ip=""),
                statuses,
            ],
        )

    async def _retry_later(self, pod: Pod, message: str) -> None:
        """Upstream's failed PrepareDynamicResources: a Warning, the pod stays Pending, and the
        next attempt comes after the backoff (a pass is kicked then)."""
        delay = self.backoff.failed(pod.metadata.uid, time.monotonic())
        asyncio.get_running_loop().call_later(delay, self.rt.kick)
        meta = pod.metadata
        await self.rt.record_event(
            "Pod",
            meta.namespace,
            meta.name,
            "Warning",
            FAILED_PREPARE,
            message,
            host=self.node_name,
            component=COMPONENT,
        )

    async def _fail(self, pod: Pod, reason: str, message: str, status_reason: str) -> None:
        ns, name = pod.metadata.namespace, pod.metadata.name
        await self.rt.record_event(
            "Pod", ns, name, "Warning", reason, message, host=self.node_name, component=COMPONENT
        )
        await self.rt.append("Pod", ns, name, [PodFailed(reason=status_reason, message=message, at=_now())])

    async def _release_classic(self, pod: Pod) -> bool:
        """Unprepare a KEP-3063 Pod's claims and leave their reservedFor; False: retry later."""
        if self.classic is None:
            return True
        errors = await self.classic.release(self.rt, pod)
        if errors:
            log.warning("%s: classic release of pod %s: %s", self.node_name, pod.metadata.name, errors)
            asyncio.get_running_loop().call_later(self.retry_base_s, self.rt.kick)
        return not errors

    async def _release(self, pod: Pod) -> None:
        uid, ns = pod.metadata.uid, pod.metadata.namespace
        self.backoff.forget(uid)
        self.runner.forget(uid)
        if self.classic is not None and self.classic.holds(uid) and not await self._release_classic(pod):
            return
        names = [n for cns, n in self.manager.claims_of_pod(uid) if cns == ns]
        outcome = await unprepare_pod(self.manager, uid, ns, names, self.plugins)
        if self.devices is not None:
            self.devices.release(uid)
        self._checkpoint()
        if not outcome.ok:
            log.warning(
                "%s: unprepare of pod %s/%s: %s", self.node_name, ns, pod.metadata.name, outcome.errors
            )
            asyncio.get_running_loop().call_later(self.retry_base_s, self.rt.kick)
            return
        await self._drop_reservations(pod)

    async def _drop_reservations(self, pod: Pod) -> None:
        ns = pod.metadata.namespace
        actions = release_reservations(pod, self.rt.items("ResourceClaim", ns))
        await execute(self.rt, actions, reason="PodReleased")

    async def _finish_deletion(self, pod: Pod) -> None:
        self.backoff.forget(pod.metadata.uid)
        self.runner.forget(pod.metadata.uid)
        if not await self._release_classic(pod):
            return
        await self._drop_reservations(pod)
        meta = pod.metadata
        await self.rt.delete("Pod", meta.namespace, meta.name, uid=meta.uid, grace_period_seconds=0)

    async def release_vanished(self, *, until: asyncio.Event | None = None, retry_s: float = 0.5) -> None:
        """Unprepare the claims of every pod the checkpoint holds that the log no longer has.

        With ``until``: keep trying (every ``retry_s``) while some are left and ``until`` is not set
        — at start the drivers' plugins register in their own time (or restart themselves), and
        the sync passes, which retry this too, only begin once the apiserver answers."""
        while True:
            await self._unprepare_vanished(self.rt.items("Pod"))
            if until is None or until.is_set() or not vanished_pods(self.manager, self.rt.items("Pod")):
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(until.wait(), retry_s)

    async def _unprepare_vanished(self, pods: list[Pod]) -> None:
        """Pods deleted while the kubelet was down: unprepare what the checkpoint still holds."""
        if self.classic is not None:
            errors = await self.classic.release_vanished(pods)
            if errors:
                log.warning("%s: classic unprepare for vanished pods: %s", self.node_name, errors)
        if self.devices is not None:
            known = {p.metadata.uid for p in pods}
            if any([self.devices.release(uid) for uid in sorted(self.devices.held_pods() - known)]):
                self._checkpoint()
        for uid in vanished_pods(self.manager, pods):
            by_ns: dict[str, list[str]] = {}
            for ns, name in self.manager.claims_of_pod(uid):
                by_ns.setdefault(ns, []).append(name)
            for ns, names in by_ns.items():
                outcome = await unprepare_pod(self.manager, uid, ns, names, self.plugins)
                if not outcome.ok:
                    log.warning("%s: unprepare for vanished pod %s: %s", self.node_name, uid, outcome.errors)
            self._checkpoint()
