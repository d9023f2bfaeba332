"""The node lifecycle service in-process, against a real nats-server and a real apiserver.

Kubelets are represented by their heartbeat only (the real ``NodeHeartbeat``: the node Lease,
renewed every quarter second, and Ready posted again when the node is not Ready); stopping one is
stopping its task. Pods are bound by appending the scheduler's facts (``tests.controllers.shells.
schedule``). The claim controller runs too, so released pods give their devices back.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from msgspec.structs import replace

from events.api.core_v1 import Node, Pod, Taint
from events.api.resource_v1 import ResourceClaim
from events.dra import PodStarted
from events.node import NodeHeartbeatLost, PodDisruptionTargeted
from infra.config import Settings
from services.apiserver.server import ApiServer
from services.claim_controller.service import ClaimControllerService
from services.cli import verify_nodes
from services.cli.verify import verify_records
from services.kubelet.heartbeat import NodeHeartbeat
from services.kubelet.node import node_object
from services.kubelet.service import KubeletService
from services.node_lifecycle.config import LifecycleConfig
from services.node_lifecycle.health import check_heartbeat
from services.node_lifecycle.service import NodeLifecycleService
from services.node_lifecycle.taints import OUT_OF_SERVICE, UNREACHABLE
from services.runtime.controller import Runtime
from tests.controllers.shells import Running, eventually, manifests, run, schedule, start_runtime

CFG = LifecycleConfig(monitor_period_s=0.2, grace_period_s=1.5, orphan_quarantine_s=0.0)

CLAIMS = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors: [{cel: {expression: "device.driver == 'gpu.example.com'"}}]
"""


def claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
        },
    }


def pod(name: str, tolerations: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}],
            "tolerations": tolerations,
        },
    }


def unreachable_for(seconds: int | None) -> dict[str, Any]:
    tol: dict[str, Any] = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}
    if seconds is not None:
        tol["tolerationSeconds"] = seconds
    return tol


class Kubelet:
    """A node's heartbeat as its kubelet runs it, startable and stoppable."""

    def __init__(self, rt: Runtime, node: str) -> None:
        self.beat = NodeHeartbeat(rt, node, duration_s=1)
        self.stop_event = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.stop_event = asyncio.Event()
        self.task = asyncio.create_task(self.beat.run(self.stop_event))

    async def stop(self) -> None:
        self.stop_event.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 5)


def ready(node: Node | None) -> str:
    cond = next((c for c in node.status.conditions if c.type == "Ready"), None) if node else None
    return cond.status if cond else "missing"


def taint_keys(node: Node | None) -> set[tuple[str, str]]:
    return {(t.key, t.effect) for t in node.spec.taints} if node else set()


SOURCES = {"NodeNotReady": "node-controller", "TaintManagerEviction": "taint-eviction-controller"}


async def events_about(rt: Runtime, name: str, reason: str) -> list[str]:
    """Messages of the Events with ``reason`` about ``name``, from upstream's component for it."""
    items, _ = await rt.api.list("Event", namespace="default")
    found = [e for e in items if e["involvedObject"]["name"] == name and e["reason"] == reason]
    for e in found:
        assert e["source"]["component"] == SOURCES.get(reason, e["source"]["component"]), e
    return [e["message"] for e in found]


async def setup(probe: Runtime, names: list[str]) -> None:
    docs = [*manifests(CLAIMS)] + [claim(f"{n}-gpu") for n in names]
    for result in await probe.api.apply(docs):
        assert result.error is None, result.error


async def bind(probe: Runtime, name: str, tolerations: list[dict[str, Any]], node: str, device: str) -> None:
    (result,) = await probe.api.apply([pod(name, tolerations)])
    assert result.error is None, result.error
    await eventually(lambda: probe.get("Pod", "default", name), what=f"pod {name} cached")
    await schedule(probe, "default", name, node, {f"{name}-gpu": [("gpu", device)]})
    await probe.append(
        "Pod", "default", name, [PodStarted(at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))]
    )


async def verified(probe: Runtime, monkeypatch: pytest.MonkeyPatch | None = None) -> dict[str, int]:
    """``draflow verify-replay`` over the test's log: every node lifecycle decision re-decided at
    its recorded position and time; with ``monkeypatch``, also that a changed decider is caught."""
    records = [r async for batch in probe.events.read_raw() for r in batch]
    verifier, divergence = verify_records(records, probe.events.root)
    assert divergence is None, divergence
    if monkeypatch is not None:
        slower = dataclasses.replace(CFG, grace_period_s=CFG.grace_period_s + 3600)
        original = verify_nodes.check_heartbeat
        monkeypatch.setattr(
            verify_nodes,
            "check_heartbeat",
            lambda n, lease, now, cfg, since=None: original(n, lease, now, slower),
        )
        _, divergence = verify_records(records, probe.events.root)
        assert divergence is not None and divergence.event == "NodeHeartbeatLost for node a"
        assert divergence.actual == {"heartbeat": "not lost"}
    return verifier.checked


async def test_a_stopped_kubelet_its_node_its_pods_and_its_return(
    apiserver: ApiServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe, probe_events = await start_runtime(settings, "probe")
    services: list[Running] = []
    kubelets: list[Kubelet] = []
    try:
        for name in ("a", "b"):
            assert await probe.apply(node_object(name, datetime.now(UTC)))
            kubelet = Kubelet(probe, name)
            kubelet.start()
            kubelets.append(kubelet)
        a, _ = kubelets
        await eventually(lambda: len(probe.items("Lease", "kube-node-lease")) == 2, what="both leases")
        await setup(probe, ["evicted", "later", "stays"])
        await bind(probe, "evicted", [unreachable_for(1)], "a", "gpu-0")
        await bind(probe, "later", [unreachable_for(60)], "a", "gpu-1")
        await bind(probe, "stays", [unreachable_for(None)], "a", "gpu-2")
        ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
        services.append(ctl)
        lifecycle, _ = await run(
            settings, "node-lifecycle", lambda rt: NodeLifecycleService(rt, CFG), resync_s=0.2
        )
        services.append(lifecycle)

        await a.stop()  # the kubelet of node a stops: no more renewals
        node_a = await eventually(
            lambda: (n := probe.get("Node", "", "a")) is not None and ready(n) == "Unknown" and n,
            what="node a Ready=Unknown",
        )
        cond = next(c for c in node_a.status.conditions if c.type == "Ready")
        assert (cond.reason, cond.message) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
        assert {c.type for c in node_a.status.conditions if c.status == "Unknown"} >= {
            "MemoryPressure",
            "PIDPressure",
        }
        await eventually(
            lambda: (
                taint_keys(probe.get("Node", "", "a"))
                == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
            )
        )
        assert all(t.time_added for t in probe.get("Node", "", "a").spec.taints)
        assert await eventually(lambda: events_about(probe, "a", "NodeNotReady")) == [
            "Node a status is now: NodeNotReady"
        ]
        assert ready(probe.get("Node", "", "b")) == "True" and not probe.get("Node", "", "b").spec.taints

        # the pod tolerating unreachable for 1 s is evicted: marked, an Event, deletion requested
        evicted: Pod = await eventually(
            lambda: (p := probe.get("Pod", "default", "evicted")) and p.metadata.deletion_timestamp and p,
            what="pod evicted",
        )
        target = next(c for c in evicted.status.conditions if c.type == "DisruptionTarget")
        assert (target.status, target.reason, target.message) == (
            "True",
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
        )
        assert await eventually(lambda: events_about(probe, "evicted", "TaintManagerEviction")) == [
            "Marking for deletion Pod default/evicted"
        ]
        for name in ("later", "stays"):
            assert probe.get("Pod", "default", name).metadata.deletion_timestamp is None
        # its kubelet is gone, so it stays Terminating and keeps its claim, as in Kubernetes
        held: ResourceClaim = probe.get("ResourceClaim", "default", "evicted-gpu")
        assert held.status.allocation is not None and [r.name for r in held.status.reserved_for] == [
            "evicted"
        ]

        # the kubelet comes back: Ready again, the taints go, the pending eviction is cancelled
        a.start()
        await eventually(lambda: ready(probe.get("Node", "", "a")) == "True", what="node a Ready again")
        await eventually(lambda: not taint_keys(probe.get("Node", "", "a")), what="taints removed")
        assert await eventually(lambda: events_about(probe, "a", "NodeReady")) == [
            "Node a status is now: NodeReady"
        ]
        assert await eventually(
            lambda: events_about(probe, "later", "TaintManagerEviction"), what="cancellation"
        ) == ["Cancelling deletion of Pod default/later"]

        # gone again, and this time an admin declares the node out of service (non-graceful
        # shutdown): every pod on it is evicted and force-deleted, the claims are released
        await a.stop()
        await eventually(lambda: ready(probe.get("Node", "", "a")) == "Unknown", what="node a Unknown again")
        node_a = probe.get("Node", "", "a")
        shutdown = Taint(key=OUT_OF_SERVICE, value="nodeshutdown", effect="NoExecute")
        assert await probe.apply(
            replace(node_a, spec=replace(node_a.spec, taints=(*node_a.spec.taints, shutdown)))
        )

        def pods_left() -> list[str]:
            return [n for n in ("evicted", "later", "stays") if probe.get("Pod", "default", n) is not None]

        await eventually(lambda: not pods_left(), what="every pod on node a force-deleted")

        def released() -> bool:
            claims = [
                probe.get("ResourceClaim", "default", f"{n}-gpu") for n in ("evicted", "later", "stays")
            ]
            return all(c.status.allocation is None and not c.status.reserved_for for c in claims)

        await eventually(released, what="every claim released and deallocated")
        # lost twice; evicted: 'evicted' by its 1 s toleration, all three by the out-of-service taint
        assert (await verified(probe, monkeypatch))["node"] >= 4
    finally:
        for kubelet in kubelets:
            await kubelet.stop()
        for svc in services:
            await svc.stop()
        await probe.stop()
        await probe_events.close()


async def test_the_pods_of_a_deleted_node_are_force_deleted(apiserver: ApiServer, settings: Settings) -> None:
    probe, probe_events = await start_runtime(settings, "probe")
    services: list[Running] = []
    try:
        assert await probe.apply(node_object("gone", datetime.now(UTC)))
        await setup(probe, ["orphan"])
        await bind(probe, "orphan", [], "gone", "gpu-0")
        ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
        lifecycle, _ = await run(
            settings, "node-lifecycle", lambda rt: NodeLifecycleService(rt, CFG), resync_s=0.2
        )
        services += [ctl, lifecycle]
        assert await probe.delete("Node", "", "gone")
        await eventually(lambda: probe.get("Pod", "default", "orphan") is None, what="orphan force-deleted")
        log = await probe.events.events(probe.events.subject("Pod", "default", "orphan"))
        types = [e.type for e in log]
        assert types[-3:] == ["PodDisruptionTargeted", "PodFailed", "PodDeleted"]
        marked = log[-3].data
        assert isinstance(marked, PodDisruptionTargeted)
        assert (marked.reason, marked.message) == ("DeletionByPodGC", "PodGC: node no longer exists")
        await eventually(
            lambda: probe.get("ResourceClaim", "default", "orphan-gpu").status.allocation is None,
            what="the orphan's claim deallocated",
        )
        assert (await verified(probe))["node"] == 1
    finally:
        for svc in services:
            await svc.stop()
        await probe.stop()
        await probe_events.close()


async def test_a_restarted_kubelet_keeps_the_node_spec_and_posts_ready(
    apiserver: ApiServer, settings: Settings
) -> None:
    """Re-registration leaves taints and cordon alone (not the kubelet's to undo, as upstream) and
    turns a node marked Unknown Ready again, with a NodeReady Event."""
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        first = KubeletService(probe, "n", settings.data_dir / "kubelet-n", {})
        await first.register()
        node = probe.get("Node", "", "n")
        cordoned = replace(
            node, spec=replace(node.spec, unschedulable=True, taints=(Taint(key="gpu", effect="NoSchedule"),))
        )
        assert await probe.apply(cordoned)
        lost = check_heartbeat(
            probe.get("Node", "", "n"), None, datetime.now(UTC) + timedelta(minutes=5), CFG
        )
        assert lost is not None
        assert await probe.append("Node", "", "n", [NodeHeartbeatLost(conditions=lost.conditions)])
        assert ready(probe.get("Node", "", "n")) == "Unknown"
        await KubeletService(probe, "n", settings.data_dir / "kubelet-n", {}).register()  # restarted
        again = probe.get("Node", "", "n")
        assert again.spec.unschedulable and [t.key for t in again.spec.taints] == ["gpu"]
        assert ready(again) == "True"
        assert await eventually(lambda: events_about(probe, "n", "NodeReady")) == [
            "Node n status is now: NodeReady"
        ]
    finally:
        await probe.stop()
        await probe_events.close()
