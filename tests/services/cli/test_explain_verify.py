"""``draflow explain pod`` and ``draflow verify-replay`` on a log the real scheduler wrote.

Three nodes with one GPU each; node-0 has 1 CPU. Pods a and b (2 CPU, one GPU each) are scheduled on
node-1 and node-2 (PodScheduling sagas allocate the GPUs); pod c fits nowhere: node-0 lacks CPU
(NodeResourcesFit), the other two have no free GPU (DynamicResources). The scheduler service runs
in-process against a real nats-server; the CLI reads the log it wrote.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.resource_v1 import ResourceClaimTemplate, ResourceClaimTemplateSpec
from draflow.events.dra import PodUnschedulable
from draflow.events.saga import TERMINAL_SAGA_EVENTS
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.apiserver.server import ApiServer
from draflow.services.cli.main import main
from draflow.services.cli.verify import Verifier, _decode, instances_of, verify_records
from draflow.services.runtime.client import ApiClient
from draflow.services.scheduler.plugins.dynamicresources.plugin import DynamicResources
from tests.builders import exact, make_claim, make_class, make_node, make_slice
from tests.helpers import assert_eventually
from tests.services.scheduler.service.conftest import Cluster

pytestmark = pytest.mark.kep4381

UNSCHEDULABLE = "0/3 nodes are available: 1 Insufficient cpu, 2 cannot allocate all claims."


async def _run_scenario(cluster: Cluster) -> None:
    template = ResourceClaimTemplate(
        metadata=ObjectMeta(name="gpu-template", namespace="default"),
        spec=ResourceClaimTemplateSpec(spec=make_claim("x", exact()).spec),
    )
    await cluster.apply(
        make_class("gpu"),
        template,
        make_node("node-0", cpu="1"),
        make_node("node-1"),
        make_node("node-2"),
        *(make_slice(f"node-{i}", 1) for i in range(3)),
    )
    for name in ("pod-a", "pod-b"):
        await cluster.pod(name, cpu="2")
    svc = await cluster.start()
    await assert_eventually(lambda: svc.outcomes["completed"] == 2, timeout_s=20)
    await cluster.pod("pod-c", cpu="2")

    async def unschedulable() -> Pod:
        pod = await cluster.get_pod("pod-c")
        cond = {c.type: c for c in pod.status.conditions}.get("PodScheduled")
        assert cond is not None and cond.message == UNSCHEDULABLE, pod.status.conditions
        return pod

    await assert_eventually(unschedulable, timeout_s=20)
    await cluster.stop_all()


@pytest.fixture
async def recorded(cluster: Cluster, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    await _run_scenario(cluster)
    monkeypatch.setenv("DRAFLOW_NATS_URL", settings.nats_url)
    monkeypatch.setenv("DRAFLOW_STREAM", settings.stream)
    monkeypatch.setenv("DRAFLOW_SUBJECT_ROOT", settings.root)
    return settings


def _draflow(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """The CLI runs its own event loop (asyncio.run): give it a thread."""
    return await asyncio.to_thread(fn, *args)


async def test_unschedulable_event_keeps_a_compact_diagnosis(
    recorded: Settings, event_store: EventStore
) -> None:
    envs = await event_store.events(event_store.subject("Pod", "default", "pod-c"))
    (ev,) = [e.data for e in envs if isinstance(e.data, PodUnschedulable)]
    assert ev.message == UNSCHEDULABLE and ev.num_nodes == 3 and ev.snapshot_seq > 0
    groups = {(r.plugin, r.reason): (r.nodes, r.node_names) for r in ev.rejections}
    assert groups == {
        ("NodeResourcesFit", "Insufficient cpu"): (1, ("node-0",)),
        ("DynamicResources", "cannot allocate all claims"): (2, ("node-1", "node-2")),
    }
    assert set(ev.unschedulable_plugins) == {"NodeResourcesFit", "DynamicResources"}


async def test_explain_pod_tells_why_it_is_pending(
    recorded: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = await _in_thread(_draflow, capsys, "explain", "pod", "pod-c")
    assert code == 0, err
    assert "Status:    Pending" in out
    assert f"Why:       Unschedulable: {UNSCHEDULABLE}" in out
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert "NODES PLUGIN REASON WHICH" in lines
    assert "1 NodeResourcesFit Insufficient cpu node-0" in lines
    assert "2 DynamicResources cannot allocate all claims node-1, node-2" in lines
    assert any("Warning FailedScheduling" in line and "default-scheduler" in line for line in lines)
    assert "Sagas:" in out and out.split("Sagas:")[1].split("\n")[1].strip() == "<none>"

    code, out, _ = await _in_thread(_draflow, capsys, "explain", "pod", "pod-a", "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["phase"] == "Pending" and doc["node"] in ("node-1", "node-2")  # bound; no kubelet here
    (saga,) = doc["sagas"]
    assert saga["type"] == "PodScheduling" and saga["state"] == "Completed"
    assert [s["name"] for s in saga["steps"]] == ["reserve", "prebind", "bind"]
    code, out, _ = await _in_thread(_draflow, capsys, "explain", "pod", "pod-a")
    assert f"PodScheduling -> node {doc['node']}: Completed" in out
    assert f"allocations tried: pod-a-gpu: gpu.example.com/{doc['node']}/" in out
    assert "ClaimAllocated" in out and "PodBound node=" in out
    # PreBind's one claim fact: allocated and reserved for the pod
    assert f"on {doc['node']}, reserved for pods/pod-a  by " in out

    code, _, err = await _in_thread(_draflow, capsys, "explain", "pod", "nope")
    assert (
        code == 1
        and err.strip() == 'error: pods "nope" not found in namespace "default": no event in the log'
    )
    code, _, err = await _in_thread(_draflow, capsys, "explain", "node", "node-0")
    assert code == 1 and "only pod" in err


async def _records(store: EventStore) -> list[Any]:
    out: list[Any] = []
    async for batch in store.read_raw():
        out.extend(batch)
    return out


async def test_verify_replay_is_clean_on_unchanged_code(
    recorded: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = await _in_thread(_draflow, capsys, "verify-replay")
    assert code == 0, out + err
    assert out.startswith(
        "verified 3 decisions (2 PodScheduling, 1 PodUnschedulable, 0 claims from templates, "
        "0 quota statuses)"
    )
    code, out, _ = await _in_thread(_draflow, capsys, "verify-replay", "--from-seq", "0")
    assert code == 1


async def test_verify_replay_catches_a_changed_scheduler(
    recorded: Settings,
    event_store: EventStore,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    records = await _records(event_store)
    # an injected behaviour change: DynamicResources now walks the nodes worst-first
    original = DynamicResources.node_order

    def worst_first(self: DynamicResources, state: Any, pod: Pod, nodes: list[Any], start: int) -> Any:
        best_first = original(self, state, pod, nodes, start)
        return reversed(list(nodes if best_first is None else best_first))

    monkeypatch.setattr(DynamicResources, "node_order", worst_first)
    _, divergence = verify_records(records, event_store.root)
    assert divergence is not None
    assert divergence.event.startswith("PodScheduling saga ") and "for pod default/pod-" in divergence.event
    assert divergence.expected["scheduled"]["node"] != divergence.actual["scheduled"]["node"]
    code, out, _ = await _in_thread(_draflow, capsys, "verify-replay")
    assert code == 1
    assert out.startswith(f"DIVERGED at seq {divergence.seq}: PodScheduling saga")
    assert "expected (recorded):" in out and "actual (current code):" in out


async def test_verify_replay_is_clean_with_many_decisions_in_flight(
    cluster: Cluster, event_store: EventStore
) -> None:
    """Ten pods at once on 4 nodes x 2 GPUs: sagas overlap, so decisions are taken with earlier ones
    still in the assume cache; verify-replay must re-create that and find no difference."""
    await cluster.nodes(4, devices=2)
    for i in range(10):
        await cluster.pod(f"p{i}")
    svc = await cluster.start()
    await assert_eventually(lambda: svc.outcomes["completed"] == 8, timeout_s=30)

    async def two_unschedulable() -> bool:
        pods = [await cluster.get_pod(f"p{i}") for i in range(10)]
        waiting = [p for p in pods if not p.spec.node_name]
        return len(waiting) == 2 and all(p.status.conditions for p in waiting)

    await assert_eventually(two_unschedulable, timeout_s=20)
    await cluster.stop_all()
    raw = await _records(event_store)
    verifier, divergence = verify_records(raw, event_store.root)
    assert divergence is None, divergence
    assert verifier.checked["schedule"] == 8 and verifier.checked["unschedulable"] >= 2
    # streamed, the fold a window behind the reading (what the command does): the same checks
    records = [(r, _decode(r)) for r in raw]
    streamed = Verifier(event_store.root)
    assert streamed.run_stream(records, instances_of(streamed, records), window=300) is None
    assert streamed.checked == verifier.checked
    # a window smaller than a decision's lag says so instead of deciding on the wrong state
    tight = Verifier(event_store.root)
    late = tight.run_stream(records, instances_of(tight, records), window=1)
    assert late is not None and late.actual["hint"] == "rerun with a larger --window", late


async def test_verify_replay_checks_quota_statuses(
    api: ApiClient, apiserver: ApiServer, event_store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real quota reconciler writes ResourceQuota status; verify-replay re-computes it with
    today's code, and catches a changed usage rule."""
    import draflow.services.quota_reconciler.reconcile as reconcile_mod
    from draflow.services.quota_reconciler.service import QuotaReconciler
    from tests.services.apiserver.test_quota import CLASS, QUOTA, claim, pod

    results = await api.apply([CLASS, QUOTA, claim("a", 2), pod("p", 1)])
    assert all(r.error is None for r in results)
    client = await ApiClient.connect(event_store.settings, actor="quota-reconciler", timeout_s=10.0)
    rec = QuotaReconciler(event_store, client)
    stop = asyncio.Event()
    task = asyncio.create_task(rec.run(stop))

    async def used(want: str) -> bool:
        quota = await api.get("ResourceQuota", "gpu", namespace="default")
        return ((quota.get("status") or {}).get("used") or {}).get(
            "count/resourceclaims.resource.k8s.io"
        ) == want

    try:
        await assert_eventually(lambda: used("1"), timeout_s=10)
        await api.delete([("ResourceClaim", "default", "a")])
        await assert_eventually(lambda: used("0"), timeout_s=10)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
        await client.close()
    records = await _records(event_store)
    verifier, divergence = verify_records(records, event_store.root)
    assert divergence is None, divergence
    assert verifier.checked["quota"] == rec.writes >= 2

    original = reconcile_mod.status_of

    def counts_double(quota: Any, usage: Any, index: Any) -> Any:  # the injected bug
        return original(quota, {k: 2 * v for k, v in usage.items()}, index)

    monkeypatch.setattr(reconcile_mod, "status_of", counts_double)  # the reconciler's own decision
    _, divergence = verify_records(records, event_store.root)
    assert divergence is not None and divergence.event == "ResourceQuota default/gpu status"
    assert divergence.expected["status"] != divergence.actual["status"]


async def test_verify_replay_keeps_one_assume_cache_per_scheduler_instance(
    cluster: Cluster, event_store: EventStore
) -> None:
    """Two scheduler instances race for the same pods (the loser's saga compensates): each decided
    with its own decisions in flight, so verify-replay re-decides each with its own cache."""
    await cluster.nodes(3, devices=2)
    for i in range(8):
        await cluster.pod(f"r{i}")
    # Both load the same log before either decides: deciding alike, they collide on the first
    # pods for certain, and every collision's loser compensates.
    a = await cluster.make("sched-a")
    b = await cluster.make("sched-b")
    await a.start()
    await b.start()
    cluster.run(a)
    cluster.run(b)

    async def all_bound() -> bool:
        pods = [await cluster.get_pod(f"r{i}") for i in range(8)]
        done = a.outcomes["completed"] + b.outcomes["completed"]
        return done == 6 and sum(bool(p.spec.node_name) for p in pods) == 6

    await assert_eventually(all_bound, timeout_s=30)

    async def sagas_ended() -> bool:  # every saga in the log has its last word (none in flight)
        heads = [
            r.header("Draflow-Type")
            async for records in event_store.last_per_subject(f"{event_store.root}.ev.Saga._.*")
            for r in records
        ]
        return bool(heads) and all(t in TERMINAL_SAGA_EVENTS for t in heads)

    await assert_eventually(sagas_ended, timeout_s=30)
    await cluster.stop_all()
    assert a.outcomes["compensated"] + b.outcomes["compensated"] >= 1, (a.outcomes, b.outcomes)
    verifier, divergence = verify_records(await _records(event_store), event_store.root)
    assert divergence is None, divergence
    assert set(verifier.snapshots) >= {"sched-a", "sched-b"}
    assert verifier.checked["schedule"] == sum(
        s.outcomes["completed"] + s.outcomes["compensated"] for s in (a, b)
    )
