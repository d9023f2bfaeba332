"""Determinism: ``draflow simulate`` at the sequence before a burst of pods was scheduled, with no
new nodes, gives exactly the nodes and devices the real scheduler chose for them.

The scheduler service runs in-process against a real nats-server and schedules a burst of pods
(one GPU each; nodes of different sizes, one of them cordoned, pods of different priorities and
CPU). The CLI then reads the log the scheduler wrote, folds it to the sequence just before the
scheduler started, and simulates: same snapshot, same plugin code, same queue order, so the same
answer, byte for byte on every run.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from draflow.infra.config import Settings
from draflow.services.cli.main import main
from tests.builders import make_node, make_slice
from tests.helpers import assert_eventually
from tests.services.scheduler.service.conftest import Cluster

pytestmark = pytest.mark.kep4381

PODS = 12


async def test_simulate_before_a_burst_matches_what_the_scheduler_did(
    cluster: Cluster, settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    await cluster.nodes(0, 0)  # the class and the claim template
    await cluster.apply(
        make_node("node-a", cpu="4"),
        make_node("node-b", cpu="16"),
        make_node("node-c"),
        make_node("node-d", unschedulable=True),
        make_slice("node-a", 2),
        make_slice("node-b", 4),
        make_slice("node-c", 8),
        make_slice("node-d", 8),
    )
    for i in range(PODS):
        await cluster.pod(f"burst-{i:02d}", cpu=str(1 + i % 3), priority=i % 2)
    before = await cluster.store.stream_last_seq()
    svc = await cluster.start()
    await assert_eventually(lambda: svc.outcomes["completed"] == PODS, timeout_s=60)
    await cluster.stop_all()
    real: dict[str, tuple[str, list[tuple[str, str, str]]]] = {}
    for i in range(PODS):
        name = f"burst-{i:02d}"
        pod = await cluster.get_pod(name)
        claim = await cluster.claim(f"{name}-gpu")
        assert claim.status.allocation is not None
        devices = [(r.driver, r.pool, r.device) for r in claim.status.allocation.devices.results]
        real[name] = (pod.spec.node_name, devices)
    assert len({node for node, _ in real.values()}) > 1  # a burst spread over several nodes

    monkeypatch.setenv("DRAFLOW_NATS_URL", settings.nats_url)
    monkeypatch.setenv("DRAFLOW_STREAM", settings.stream)
    monkeypatch.setenv("DRAFLOW_SUBJECT_ROOT", settings.root)

    def simulate() -> tuple[int, str]:
        capsys.readouterr()
        code = main(["simulate", "--as-of-seq", str(before), "-o", "json"])
        return code, capsys.readouterr().out

    code, out = await asyncio.to_thread(simulate)
    assert code == 0, out
    doc = json.loads(out)
    assert doc["asOfSeq"] == before
    simulated = {
        p["name"]: (p["node"], [(d["driver"], d["pool"], d["device"]) for d in p["devices"]])
        for p in doc["pods"]
    }
    assert simulated == real
    assert all(not p["newNode"] for p in doc["pods"])
    _, again = await asyncio.to_thread(simulate)
    assert again == out
