"""Issue 26, parts 1 and 2, with the real scheduler service on a real nats-server and apiserver.

Four nodes with eight GPUs each. Pod ``sel`` asks for a GPU its CEL selector matches on no
device, pod ``twelve`` for 12 GPUs, pod ``forty`` for 40 (over the 32-results limit of a claim).
The first two get upstream's identical FailedScheduling message; ``explain`` (text and JSON) and
``describe`` (pod and claim) tell them apart with the allocator's per-request diagnosis. The third
is an error with the allocator's own message, as upstream's scheduler reports it.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.dra import PodUnschedulable
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.cli.main import main
from tests.builders import exact
from tests.helpers import assert_eventually
from tests.services.scheduler.service.conftest import Cluster

pytestmark = pytest.mark.kep4381

UNSCHEDULABLE = "0/4 nodes are available: 4 cannot allocate all claims."
LIMIT = (
    'running "DynamicResources" filter plugin: '
    "claim default/forty-gpu: number of requested devices 40 exceeds the claim limit of 32"
)
NO_MATCH = 'device.attributes["gpu.example.com"].index == 99'


@pytest.fixture
async def recorded(cluster: Cluster, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    await cluster.nodes(4, 8)
    await cluster.pod("sel", exact(selectors=[NO_MATCH]))
    await cluster.pod("twelve", exact(count=12))
    await cluster.pod("forty", exact(count=40))
    await cluster.start()

    async def condition(name: str, message: str) -> bool:
        pod = await cluster.get_pod(name)
        cond = {c.type: c for c in pod.status.conditions}.get("PodScheduled")
        assert cond is not None and cond.message == message, pod.status.conditions
        return True

    await assert_eventually(lambda: condition("sel", UNSCHEDULABLE), timeout_s=20)
    await assert_eventually(lambda: condition("twelve", UNSCHEDULABLE), timeout_s=20)
    await assert_eventually(lambda: condition("forty", LIMIT), timeout_s=20)

    async def claim_events() -> bool:  # recorded after the condition: wait for them too
        items, _ = await cluster.api.list("Event", namespace="default")
        for name in ("sel", "twelve"):
            about = [e["involvedObject"]["name"] for e in items if e["reason"] == "CannotAllocate"]
            assert f"{name}-gpu" in about, name
        return True

    await assert_eventually(claim_events, timeout_s=20)
    await cluster.stop_all()
    monkeypatch.setenv("DRAFLOW_NATS_URL", settings.nats_url)
    monkeypatch.setenv("DRAFLOW_STREAM", settings.stream)
    monkeypatch.setenv("DRAFLOW_SUBJECT_ROOT", settings.root)
    return settings


def _draflow(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


async def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    return await asyncio.to_thread(_draflow, capsys, *args)


async def test_the_two_failures_are_told_apart(
    recorded: Settings, event_store: EventStore, capsys: pytest.CaptureFixture[str]
) -> None:
    sel = await _cli(capsys, "explain", "pod", "sel")
    twelve = await _cli(capsys, "explain", "pod", "twelve")
    for out in (sel, twelve):
        assert f"Why:       Unschedulable: {UNSCHEDULABLE}" in out
        assert "Requests (why the nodes that could not allocate the claims had no room):" in out
    assert (
        "claim default/sel-gpu, request gpu: the request's selectors match none of the 8 devices of the class"
        in sel
    )
    assert "asked 1: class gpu matched 8; selectors 0; usable 0; found 0" in sel
    assert "on 4 nodes (node-0, node-1, node-2, node-3), per the device index" in sel
    assert "claim default/twelve-gpu, request gpu: too few devices: 8 usable, 12 asked" in twelve
    assert "asked 12: class gpu matched 8; selectors 8; usable 8; found 8" in twelve

    doc = json.loads(await _cli(capsys, "explain", "pod", "twelve", "-o", "json"))
    (attempt, *_) = doc["unschedulable"]
    assert attempt["message"] == UNSCHEDULABLE
    (line,) = attempt["requests"]
    assert {k: line[k] for k in ("claim", "request", "asked", "selected", "usable", "found", "nodes")} == {
        "claim": "default/twelve-gpu",
        "request": "gpu",
        "asked": 12,
        "selected": 8,
        "usable": 8,
        "found": 8,
        "nodes": 4,
    }

    envs = await event_store.events(event_store.subject("Pod", "default", "sel"))
    (first, *_) = [e.data for e in envs if isinstance(e.data, PodUnschedulable)]
    assert first.requests and first.requests[0].selected == 0


async def test_describe_claim_and_pod_carry_the_diagnosis(
    recorded: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = await _cli(capsys, "describe", "resourceclaim", "twelve-gpu")
    (line,) = [x for x in claim.splitlines() if "CannotAllocate" in x]
    assert "Warning" in line and "default-scheduler" in line
    assert "pod default/twelve, request gpu: too few devices: 8 usable, 12 asked" in line
    pod = await _cli(capsys, "describe", "pod", "sel")
    assert any("FailedScheduling" in x and UNSCHEDULABLE in x for x in pod.splitlines())
    told = "claim default/sel-gpu, request gpu: the request's selectors match none"
    assert any("CannotAllocate" in x and told in x for x in pod.splitlines())


async def test_an_allocator_error_is_the_failed_scheduling_message(
    recorded: Settings, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    out = await _cli(capsys, "explain", "pod", "forty")
    assert f"Why:       SchedulerError: {LIMIT}" in out
    assert any("FailedScheduling" in x and LIMIT in x for x in out.splitlines())
    pod = await cluster.get_pod("forty")
    assert isinstance(pod, Pod) and not pod.spec.node_name
