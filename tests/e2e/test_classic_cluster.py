"""KEP-3063 flows through the real services (see ``cluster.py``): apiserver, driver-controller,
ACME publisher and kubelets as processes, the scheduler service in-process, a real nats-server."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from draflow.events.dra import PodSucceeded
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.drivers import cdi
from draflow.services.runtime.kubeletapi import sockets
from draflow.services.scheduler.plugins.classic.plugin import (
    WAIT_ALLOCATION,
    WAIT_INFORMATION,
    WAIT_RESERVATION,
)
from tests.e2e.classic_cluster import (
    CLAIMS,
    FABRIC,
    ClassicCluster,
    acme,
    claim,
    eventually,
    example,
    plain_pod,
    pod,
)
from tests.processes import Proc

pytestmark = pytest.mark.kep3063


@pytest.fixture
async def cluster(settings: Settings, event_store: EventStore) -> AsyncIterator[ClassicCluster]:
    c = ClassicCluster(settings, event_store)
    try:
        yield c
    finally:
        codes = await c.stop()
        assert all(code == 0 for code in codes), {n: p.stderr[-20:] for n, p in c.procs.items()}


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text: str = resp.read().decode()
    return text


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_device_consumer_runs_as_written_and_metrics(
    cluster: ClassicCluster, unused_tcp_port: int
) -> None:
    """The seed's acme-gpu class and device-consumer Pod, unchanged: the claim is created from the
    inline template, allocated 2Gi on a GPU of the pod's node, the pod is reserved, prepared by the
    kubelet (both containers get the CDI device) and runs. The driver-controller's KEP metrics are
    scraped from its /metrics endpoint."""
    await cluster.start(
        {"node-a": acme(2, "8Gi"), "node-b": acme(2, "8Gi")},
        acme_publisher=True,
        DRAFLOW_METRICS_PORT=str(unused_tcp_port),
    )
    await cluster.apply(*example("acme-gpu-resourceclass.yaml"), *example("device-consumer-pod.yaml"))
    running = await cluster.running("device-consumer")
    node = running["spec"]["nodeName"]
    got = await cluster.allocated("device-consumer-gpu")
    assert got["metadata"]["ownerReferences"][0]["name"] == "device-consumer"
    assert got["status"]["attributes"]["node"] == node
    assert got["status"]["attributes"]["memory"] == "2Gi"
    assert [u["name"] for u in got["status"]["reservedFor"]] == ["device-consumer"]
    assert got["metadata"]["finalizers"] == ["gpu.acme.com/deletion-protection"]
    prepared = [
        env.data
        for env in await cluster.store.events(cluster.store.subject("Pod", "default", "device-consumer"))
        if type(env.data).__name__ == "PodResourcesPrepared"
    ]
    uid = got["metadata"]["uid"]
    devices = {c.container: c.cdi_ids for c in prepared[0].containers}  # type: ignore[attr-defined]
    assert devices == {"workload": (f"gpu.acme.com/gpu={uid}",), "monitor": (f"gpu.acme.com/gpu={uid}",)}

    text = _scrape(unused_tcp_port)
    assert _metric(text, "resource_controller_create_total") >= 1
    assert _metric(text, "resource_controller_create_failures_total") == 0
    assert 'workqueue_depth{name="resource_claim"}' in text

    # Pod deleted: the kubelet unprepares and leaves reservedFor, the claim (owned by the pod) is
    # deleted and freed by the teardown saga, and disappears once its finalizer is gone.
    await cluster.delete("Pod", "device-consumer")
    await cluster.gone(CLAIMS, "device-consumer-gpu")
    await cluster.gone("Pod", "device-consumer")


FPGA_CLASS = example("fpga-resourceclass.yaml")[0]
ACME_CLASS = example("acme-gpu-resourceclass.yaml")[0]


async def test_immediate_allocation_constrains_where_the_pod_runs(cluster: ClassicCluster) -> None:
    """An Immediate FPGA claim: the pod is unschedulable until the driver allocated (programming
    takes 1 s); the allocation's availableOnNodes (the fabric label) then keeps the pod off the
    node without the label."""
    await cluster.start(
        {"node-a": "zone=a", "node-b": FABRIC},
        DRAFLOW_CLASSIC_DRIVER_OPTIONS='{"fpga.example.com": {"programming_delay_s": 1.0}}',
    )
    params = {"bitstream": "/images/aes.xclbin", "users": -1}
    users = [pod(f"encryptor-{i}", {"fpga": "aes"}) for i in range(1, 4)]
    await cluster.apply(
        FPGA_CLASS, claim("aes", "fpga", params, mode="Immediate"), pod("encryptor", {"fpga": "aes"})
    )

    async def waiting() -> str:
        p = await cluster.pod("encryptor")
        conds = (p or {}).get("status", {}).get("conditions", [])
        return " ".join(c.get("message", "") for c in conds if c["type"] == "PodScheduled")

    assert "unallocated immediate resourceclaim aes" in await eventually(waiting)
    assert (await cluster.claim("aes") or {})["status"].get("phase") == "Pending"
    got = await cluster.allocated("aes")
    terms = got["status"]["scheduling"]["driver"]["availableOnNodes"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["key"] == "fpga.example.com/fabric"
    running = await cluster.running("encryptor")
    assert running["spec"]["nodeName"] == "node-b"
    await cluster.apply(*users)  # more pods: none lands on node-a (not by luck of the node walk)
    for p in users:
        assert (await cluster.running(p["metadata"]["name"]))["spec"]["nodeName"] == "node-b"


async def test_delayed_allocation_converges_through_unsuitable_nodes(cluster: ClassicCluster) -> None:
    """Two 2Gi claims of one pod: node-a has one 3Gi GPU (cannot hold both), node-b 8Gi. The
    scheduler publishes potentialNodes and waits for the driver's answer, the driver marks node-a
    unsuitable for both claims, the scheduler selects node-b, the driver allocates there."""
    await cluster.start({"node-a": acme(1, "3Gi"), "node-b": acme(1, "8Gi")}, acme_publisher=True)
    template = {"resourceClassName": "acme-gpu", "parameters": {"memory": "2Gi"}}
    await cluster.apply(ACME_CLASS, pod("trainer", {"g1": template, "g2": template}))
    running = await cluster.running("trainer")
    assert running["spec"]["nodeName"] == "node-b"
    for name in ("trainer-g1", "trainer-g2"):
        got = await cluster.allocated(name)
        assert got["status"]["attributes"]["node"] == "node-b"
        history = [s.scheduling for s in await cluster.claim_history(name) if s.scheduling is not None]
        assert any(set(s.scheduler.potential_nodes) == {"node-a", "node-b"} for s in history), history
        assert any(s.driver.unsuitable_nodes == ("node-a",) for s in history), history
        assert any(s.scheduler.selected_node == "node-b" for s in history), history
        assert not any(s.scheduler.selected_node == "node-a" for s in history), history
    # The node is selected only once the driver's answer to the published list is recorded for
    # both claims (not merely because the list was published in an earlier attempt).
    answered: dict[str, int] = {}  # claim -> stream sequence of its first recorded answer
    selected: list[int] = []
    for name in ("trainer-g1", "trainer-g2"):
        for env in await cluster.store.events(cluster.store.subject("ClassicResourceClaim", "default", name)):
            sched = getattr(getattr(env.data, "status", None), "scheduling", None)
            if sched is None:
                continue
            if sched.driver.answered_potential_nodes:
                answered.setdefault(name, env.seq)
            if sched.scheduler.selected_node:
                selected.append(env.seq)
    assert len(answered) == 2 and selected, (answered, selected)
    assert min(selected) > max(answered.values()), (answered, selected)
    # Reserve's waits are reported as Unschedulable with their reason (upstream), never as errors.
    # Which waits an attempt meets depends on timing (a driver that answers before the next
    # attempt leaves no "provide information" wait: tests/services/scheduler/test_classic_plugin.py
    # pins each reason); every one is a known wait.
    attempts = await cluster.unschedulable_history("trainer")
    assert [a for a in attempts if a.reason != "Unschedulable"] == [], attempts
    waits = {a.message for a in attempts if a.unschedulable_plugins == ("ClassicDynamicResources",)}
    known = re.compile(
        rf"^0/\d+ nodes are available: (1 )?({WAIT_ALLOCATION}|{WAIT_INFORMATION}|{WAIT_RESERVATION}"
        r"|waiting for resourceclaim trainer-g[12])\.$"
    )
    assert waits and all(known.match(m) for m in waits), waits


async def test_driver_failure_on_selected_node_moves_the_pod(cluster: ClassicCluster) -> None:
    """node-a cannot reach the FPGA fabric but is the only node with CPU left, so the scheduler
    selects it; the driver fails there definitely: node-a becomes unsuitable and selectedNode is
    cleared. Once CPU frees up on node-b the pod is allocated and runs there."""
    await cluster.start({"node-a": "zone=a", "node-b": FABRIC})
    await cluster.apply(FPGA_CLASS, plain_pod("filler", cpu="6", node_name="node-b"))
    await cluster.running("filler")
    template = {"resourceClassName": "fpga", "parameters": {"bitstream": "/images/resnet50.bit"}}
    await cluster.apply(pod("job", {"fpga": template}, cpu="4"))

    async def failed_on_a() -> bool:
        history = [s.scheduling for s in await cluster.claim_history("job-fpga") if s.scheduling is not None]
        return any(
            s.driver.unsuitable_nodes == ("node-a",) and not s.scheduler.selected_node for s in history
        )

    await eventually(failed_on_a)
    history = [s.scheduling for s in await cluster.claim_history("job-fpga") if s.scheduling is not None]
    assert any(s.scheduler.selected_node == "node-a" for s in history)
    assert (await cluster.pod("job") or {})["spec"].get("nodeName") is None
    await cluster.delete("Pod", "filler")
    running = await cluster.running("job")
    assert running["spec"]["nodeName"] == "node-b"
    got = await cluster.allocated("job-fpga")
    assert got["status"]["attributes"]["fpga"] == "fpga-0"


async def test_reallocate_frees_a_claim_where_the_pod_cannot_fit(cluster: ClassicCluster) -> None:
    """A standalone Delayed claim stays allocated on the node of its first user. With that node's
    CPU taken, the next pod fits nowhere: on the claim's node for CPU, elsewhere because the
    claim is not available there. PostFilter sets phase Reallocate, the driver frees the GPU, the
    claim is allocated again on the other node and the pod runs there."""
    await cluster.start({"node-a": acme(1, "8Gi"), "node-b": acme(1, "8Gi")}, acme_publisher=True)
    await cluster.apply(
        ACME_CLASS, claim("shared", "acme-gpu", {"memory": "4Gi"}), pod("first", {"gpu": "shared"})
    )
    first = await cluster.running("first")
    old_node = first["spec"]["nodeName"]
    other = "node-b" if old_node == "node-a" else "node-a"
    await cluster.delete("Pod", "first")
    await cluster.gone("Pod", "first")

    async def unused() -> bool:
        got = await cluster.claim("shared") or {"status": {}}
        return not got["status"].get("reservedFor") and got["status"].get("phase") == "Allocated"

    await eventually(unused)
    await cluster.apply(plain_pod("filler", cpu="8", node_name=old_node))
    await cluster.running("filler")
    await cluster.apply(pod("second", {"gpu": "shared"}, cpu="1"))
    running = await cluster.running("second")
    assert running["spec"]["nodeName"] == other
    got = await cluster.allocated("shared")
    assert got["status"]["attributes"]["node"] == other
    phases = [s.phase for s in await cluster.claim_history("shared")]
    assert "Reallocate" in phases


async def test_user_limit_one_versus_unlimited(cluster: ClassicCluster) -> None:
    """users: 1 -> the second pod stays unschedulable ("in use") while the first holds the claim
    and runs once the first is gone; users: -1 -> both pods are reserved and run at once."""
    await cluster.start({"node-a": FABRIC})
    params = {"bitstream": "/images/aes.xclbin"}
    await cluster.apply(
        FPGA_CLASS,
        claim("single", "fpga", {**params, "users": 1}, mode="Immediate"),
        claim("multi", "fpga", {**params, "users": -1}, mode="Immediate"),
        pod("s1", {"fpga": "single"}),
        pod("s2", {"fpga": "single"}),
        pod("m1", {"fpga": "multi"}),
        pod("m2", {"fpga": "multi"}),
    )
    await cluster.running("m1")
    await cluster.running("m2")
    multi = await cluster.allocated("multi")
    assert sorted(u["name"] for u in multi["status"]["reservedFor"]) == ["m1", "m2"]
    assert multi["status"]["userLimit"] == -1

    async def one_runs() -> tuple[str, str] | None:
        p1, p2 = await cluster.pod("s1"), await cluster.pod("s2")
        phases = [(p or {}).get("status", {}).get("phase") for p in (p1, p2)]
        if "Running" not in phases:
            return None
        return ("s1", "s2") if phases[0] == "Running" else ("s2", "s1")

    winner, loser = await eventually(one_runs)
    single = await cluster.allocated("single")
    assert [u["name"] for u in single["status"]["reservedFor"]] == [winner]

    async def in_use() -> bool:
        p = await cluster.pod(loser) or {}
        conds = p.get("status", {}).get("conditions", [])
        return any("resourceclaim single is in use" in c.get("message", "") for c in conds)

    await eventually(in_use)
    assert not (await cluster.pod(loser) or {})["spec"].get("nodeName")
    await cluster.delete("Pod", winner)
    await cluster.running(loser)


async def test_deletion_waits_for_the_finalizer(cluster: ClassicCluster) -> None:
    """Deleting a claim in use only marks it: the driver's finalizer keeps it (and its FPGA)
    while a pod is reserved; after the pod is gone the teardown frees it and the claim goes."""
    await cluster.start({"node-a": FABRIC})
    fpga_claim = claim("aes", "fpga", {"bitstream": "/images/aes.xclbin"}, mode="Immediate")
    await cluster.apply(FPGA_CLASS, fpga_claim, pod("user", {"fpga": "aes"}))
    await cluster.running("user")
    await cluster.delete(CLAIMS, "aes")

    async def marked() -> dict[str, object] | None:
        got = await cluster.claim("aes")
        return got if got and got["metadata"].get("deletionTimestamp") else None

    await eventually(marked)
    # The driver-controller allocating a claim created after the mark proves it has run a pass
    # that saw the mark (its passes follow the log): it must not have freed the claim in use.
    await cluster.apply(claim("later", "fpga", {"bitstream": "/images/aes.xclbin"}, mode="Immediate"))
    await cluster.allocated("later")
    got = await cluster.claim("aes")
    assert got is not None
    assert got["metadata"]["finalizers"] == ["fpga.example.com/deletion-protection"]
    assert got["status"]["phase"] == "Allocated"
    await cluster.delete("Pod", "user")
    await cluster.gone(CLAIMS, "aes")


async def test_kubelet_keeps_a_pod_not_in_reserved_for_pending(cluster: ClassicCluster) -> None:
    """A pod placed on a node directly (no scheduler, so not in the claim's reservedFor) is not
    run by the kubelet even though the claim is allocated and available there; nor is it failed:
    it stays Pending with ``FailedPrepareDynamicResources`` Warnings, as upstream's kubelet keeps
    it (issue 23 item 1)."""
    await cluster.start({"node-a": FABRIC})
    fpga_claim = claim("aes", "fpga", {"bitstream": "/images/aes.xclbin", "users": -1}, mode="Immediate")
    await cluster.apply(FPGA_CLASS, fpga_claim)
    await cluster.allocated("aes")
    await cluster.apply(pod("sneaky", {"fpga": "aes"}, node_name="node-a"))

    async def warned() -> str | None:
        events, _ = await cluster.client.list("Event", namespace="default")
        for e in events:
            if e.get("reason") == "FailedPrepareDynamicResources" and "sneaky" in str(
                e.get("involvedObject")
            ):
                return str(e.get("message"))
        return None

    message = await eventually(warned)
    assert "pod is not in reservedFor of resourceclaim aes" in message
    p = await cluster.pod("sneaky")
    assert p is not None and p.get("status", {}).get("phase", "Pending") == "Pending"
    assert not (await cluster.claim("aes") or {})["status"].get("reservedFor")


async def _saga_subject(store: EventStore, claim_uid: str) -> str | None:
    for env in await store.events(f"{store.root}.ev.Saga.>"):
        data = env.data
        if type(data).__name__ == "SagaStarted" and data.input.get("uid") == claim_uid:  # type: ignore[attr-defined]
            return env.subject
    return None


async def test_driver_controller_killed_mid_allocation_resumes_without_leaking(
    cluster: ClassicCluster,
) -> None:
    """SIGKILL while an FPGA is being programmed for claim ``a`` (fpga-0 already belongs to ``z``).
    The restarted driver-controller first rebuilds its books from the allocated claims, then
    resumes the saga: ``a`` gets another FPGA (not z's), one finalizer each; a later claim gets the
    last free FPGA; after deleting everything every FPGA is free again."""
    slow = '{"fpga.example.com": {"programming_delay_s": 1.5}}'
    await cluster.start({}, DRAFLOW_CLASSIC_DRIVER_OPTIONS=slow)
    params = {"bitstream": "/images/aes.xclbin", "memory": "8Gi"}
    await cluster.apply(FPGA_CLASS, claim("z", "fpga", params, mode="Immediate"))
    z = await cluster.allocated("z")
    assert z["status"]["attributes"]["fpga"] == "fpga-0"
    await cluster.apply(claim("a", "fpga", params, mode="Immediate"))
    a_uid = (await cluster.claim("a") or {})["metadata"]["uid"]

    async def programming() -> bool:
        subject = await _saga_subject(cluster.store, a_uid)
        if subject is None:
            return False
        steps = [getattr(e.data, "step", "") for e in await cluster.store.events(subject)]
        return "allocate-and-record" in steps

    await eventually(programming)
    assert (await cluster.claim("a") or {})["status"]["phase"] == "Pending"
    assert cluster.procs["driver-controller"].kill() == -9

    cluster.driver_env["DRAFLOW_CLASSIC_DRIVER_OPTIONS"] = (
        '{"fpga.example.com": {"programming_delay_s": 0.2}}'
    )
    cluster.start_driver_controller()
    a = await cluster.allocated("a")
    assert a["status"]["attributes"]["fpga"] == "fpga-1"  # not fpga-0: z's FPGA is not handed out twice
    for got in (a, await cluster.claim("z")):
        assert got is not None and got["metadata"]["finalizers"] == ["fpga.example.com/deletion-protection"]
    subject = await _saga_subject(cluster.store, a_uid)
    assert subject is not None
    kinds = [type(e.data).__name__ for e in await cluster.store.events(subject)]
    assert kinds[-1] == "SagaCompleted", kinds

    await cluster.apply(claim("b", "fpga", params, mode="Immediate"))
    assert (await cluster.allocated("b"))["status"]["attributes"]["fpga"] == "fpga-2"
    for name in ("z", "a", "b"):
        await cluster.delete(CLAIMS, name)
    for name in ("z", "a", "b"):
        await cluster.gone(CLAIMS, name)
    await cluster.apply(claim("c", "fpga", params, mode="Immediate"))
    assert (await cluster.allocated("c"))["status"]["attributes"]["fpga"] == "fpga-0"


async def _prepared_then_killed(cluster: ClassicCluster, settings: Settings) -> tuple[str, Path, str, Path]:
    """A pod ``job`` with a prepared ACME claim runs on node-a, whose kubelet is then SIGKILLed.
    Returns the claim uid, the node's CDI root, the claim's spec name and the plugin checkpoint."""
    labels = acme(1, "8Gi")
    await cluster.start({"node-a": labels}, acme_publisher=True)
    template = {"resourceClassName": "acme-gpu", "parameters": {"memory": "2Gi"}}
    await cluster.apply(ACME_CLASS, pod("job", {"gpu": template}))
    await cluster.running("job")
    got = await cluster.allocated("job-gpu")
    uid = got["metadata"]["uid"]
    cdi_root = settings.data_dir / "cdi" / "node-a"
    spec_name = cdi.transient_spec_name("gpu.acme.com", "gpu", uid)
    assert cdi.read_spec(cdi_root, spec_name) is not None
    # the gpu.acme.com plugin process keeps its own checkpoint (it is not the kubelet's)
    plugin_checkpoint = sockets.plugins_dir(settings.data_dir, "node-a") / "gpu.acme.com" / "checkpoint.json"
    assert uid in json.loads(plugin_checkpoint.read_text())
    assert cluster.procs["kubelet-node-a"].kill() == -9
    return uid, cdi_root, spec_name, plugin_checkpoint


def _unprepared(
    settings: Settings, uid: str, cdi_root: Path, spec_name: str, plugin_checkpoint: Path
) -> bool:
    """CDI spec gone, and the claim out of the plugin's checkpoint and the kubelet's pods.json
    (written one after the other: poll for all three, never assert the last one afterwards)."""
    pods_checkpoint = settings.data_dir / "kubelet-node-a" / "classic" / "pods.json"
    return (
        cdi.read_spec(cdi_root, spec_name) is None
        and uid not in json.loads(plugin_checkpoint.read_text())
        and json.loads(pods_checkpoint.read_text()) == {}
    )


def _restart_kubelet(cluster: ClassicCluster, settings: Settings) -> None:
    labels = acme(1, "8Gi")
    restarted = Proc(
        settings, "draflow.services.kubelet", ["--node", "node-a", "--gpus", "0", "--labels", labels]
    )
    cluster.procs["kubelet-node-a"] = restarted
    restarted.expect("kubelet node-a: registered")


async def test_kubelet_restart_keeps_classic_claims_and_unprepares_finished_pods(
    cluster: ClassicCluster, settings: Settings
) -> None:
    """A pod with a prepared ACME claim runs; its kubelet is SIGKILLed and started again. The
    restarted kubelet still knows what it had prepared through the plugin (its checkpoint):
    it does not prepare again, and when the pod then succeeds it unprepares (CDI spec removed,
    checkpoint empty) although it never prepared anything itself."""
    uid, cdi_root, spec_name, plugin_checkpoint = await _prepared_then_killed(cluster, settings)
    _restart_kubelet(cluster, settings)

    pod_subject = cluster.store.subject("Pod", "default", "job")
    await cluster.store.append(pod_subject, PodSucceeded(at="2026-01-01T00:00:00Z"), expected_last_seq=None)

    async def unprepared() -> bool:
        return _unprepared(settings, uid, cdi_root, spec_name, plugin_checkpoint)

    await eventually(unprepared, 30.0, "the finished pod's claim unprepared by the restarted kubelet")
    kinds = [type(env.data).__name__ for env in await cluster.store.events(pod_subject)]
    assert kinds.count("PodResourcesPrepared") == 1, kinds

    async def unreserved() -> bool:
        claim_now = await cluster.claim("job-gpu")
        return claim_now is not None and not claim_now["status"].get("reservedFor")

    await eventually(unreserved, 30.0, "the finished pod left reservedFor")


async def test_kubelet_restart_unprepares_a_pod_deleted_while_it_was_down(
    cluster: ClassicCluster, settings: Settings
) -> None:
    """The pod is force-deleted (grace period 0) while its kubelet is down, so no kubelet ever
    sees it go: the restarted kubelet finds a prepared pod that no longer exists in its
    checkpoint and unprepares it (``release_vanished``): CDI spec removed, both checkpoints empty."""
    uid, cdi_root, spec_name, plugin_checkpoint = await _prepared_then_killed(cluster, settings)
    results = await cluster.client.delete([("Pod", "default", "job")], grace_period_seconds=0)
    assert [r.error for r in results] == [None], results
    await cluster.gone("Pod", "job")
    assert cdi.read_spec(cdi_root, spec_name) is not None  # nobody unprepared it yet
    _restart_kubelet(cluster, settings)

    async def unprepared() -> bool:
        return _unprepared(settings, uid, cdi_root, spec_name, plugin_checkpoint)

    await eventually(unprepared, 30.0, "the vanished pod's claim unprepared by the restarted kubelet")
