"""``draflow explain pod NAME`` for a re-created pod: the current uid only, earlier pods as history.

The real scheduler (in-process, real nats-server) schedules pod-a with a GPU claim (a PodScheduling
saga allocates it); pod-a is force-deleted and created again asking for more CPU than any node
has, so the new pod-a (a new uid) is unschedulable. Explaining pod-a must not show the first
pod's saga as an attempt, nor its claim, except in the clearly marked history of earlier pods.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.infra.config import Settings
from draflow.services.cli.main import main
from tests.builders import make_pod
from tests.helpers import assert_eventually
from tests.services.scheduler.service.conftest import Cluster


def _draflow(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


async def _recreated(cluster: Cluster) -> tuple[str, str]:
    await cluster.nodes(1, devices=1)
    first, claim = await cluster.pod("pod-a")
    svc = await cluster.start()
    await assert_eventually(lambda: svc.outcomes["completed"] == 1, timeout_s=20)
    (res,) = await cluster.api.delete([("Pod", "default", "pod-a")], grace_period_seconds=0)
    assert res.error is None
    await cluster.apply(make_pod("pod-a", cpu="512"))
    second = await cluster.get_pod("pod-a")
    assert second.metadata.uid != first.metadata.uid

    async def unschedulable() -> Pod:
        pod = await cluster.get_pod("pod-a")
        cond = {c.type: c for c in pod.status.conditions}.get("PodScheduled")
        assert cond is not None and cond.status == "False", pod.status.conditions
        return pod

    await assert_eventually(unschedulable, timeout_s=20)
    await cluster.stop_all()
    assert claim == "pod-a-gpu"
    return first.metadata.uid, second.metadata.uid


async def test_explain_keys_everything_by_uid(
    cluster: Cluster, settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    old_uid, new_uid = await _recreated(cluster)
    monkeypatch.setenv("DRAFLOW_NATS_URL", settings.nats_url)
    monkeypatch.setenv("DRAFLOW_STREAM", settings.stream)
    monkeypatch.setenv("DRAFLOW_SUBJECT_ROOT", settings.root)

    code, out, err = await asyncio.to_thread(_draflow, capsys, "explain", "pod", "pod-a", "-o", "json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    assert doc["uid"] == new_uid and doc["phase"] == "Pending"
    assert doc["sagas"] == [] and doc["claims"] == []
    assert len(doc["unschedulable"]) >= 1
    (earlier,) = doc["earlierIncarnations"]
    assert earlier["uid"] == old_uid and earlier["claims"] == ["pod-a-gpu"] and len(earlier["sagas"]) == 1
    old_saga = earlier["sagas"][0]

    code, out, err = await asyncio.to_thread(_draflow, capsys, "explain", "pod", "pod-a")
    assert code == 0, err
    current, _, history = out.partition(
        "Earlier incarnations (history only: deleted pods that had this name):"
    )
    assert history, out
    assert f"(uid {new_uid})" in current and old_uid not in current
    assert "re-created: 1 earlier pod of this name" in current
    attempts = current.split("Scheduling attempts:")[1].split("Sagas:")[0]
    assert "#1" in attempts and "Unschedulable" in attempts and "PodScheduling" not in attempts
    assert old_saga not in current and "pod-a-gpu" not in current
    assert current.split("Sagas:")[1].split("\n")[1].strip() == "<none>"
    assert f"uid {old_uid}" in history and f"saga {old_saga}  PodScheduling  Completed" in history
    assert "claim pod-a-gpu: allocated gpu.example.com/node-0/" in history

    # explained as it was before the second pod existed: one pod, its saga, no history
    code, out, err = await asyncio.to_thread(
        _draflow,
        capsys,
        "explain",
        "pod",
        "pod-a",
        "-o",
        "json",
        "--as-of-seq",
        str(earlier["deletedSeq"] - 1),
    )
    assert code == 0, err
    before = json.loads(out)
    assert before["uid"] == old_uid and before["earlierIncarnations"] == []
    assert [s["id"] for s in before["sagas"]] == [old_saga] and before["claims"] == ["pod-a-gpu"]
