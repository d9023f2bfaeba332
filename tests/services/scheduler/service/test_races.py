"""Concurrency and crashes: two schedulers racing, a scheduler process killed mid-saga."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest
from nats.aio.msg import Msg

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.dra import ClaimAllocated, ClaimDeallocated
from draflow.events.objects import decode_stored
from draflow.events.saga import TERMINAL_SAGA_EVENTS
from draflow.events.subjects import stored_prefix
from draflow.infra.config import Settings
from tests.helpers import assert_eventually
from tests.paths import ROOT
from tests.services.scheduler.service.conftest import Cluster

pytestmark = pytest.mark.kep4381


def _env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "DRAFLOW_NATS_URL": settings.nats_url,
        "DRAFLOW_STREAM": settings.stream,
        "DRAFLOW_SUBJECT_ROOT": settings.root,
        "DRAFLOW_DATA_DIR": str(settings.data_dir),
        "DRAFLOW_LOG_LEVEL": "WARNING",
    }


async def _draflow_log(settings: Settings, subject: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "draflow.services.cli",
        "log",
        "--subject",
        subject,
        cwd=ROOT,
        env=_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def _spawn(settings: Settings) -> asyncio.subprocess.Process:
    """``python -m draflow.services.scheduler`` as Procfile runs it."""
    env = {**_env(settings), "DRAFLOW_LOG_LEVEL": "INFO"}  # its log is in a failure's message
    with (settings.data_dir / "scheduler.stderr").open("ab") as errlog:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "draflow.services.scheduler", cwd=ROOT, env=env, stderr=errlog
        )


async def test_two_schedulers_race_for_the_last_device(cluster: Cluster, settings: Settings) -> None:
    await cluster.nodes(1, devices=1)
    pod, claim_name = await cluster.pod("pod-0")
    a = await cluster.make("sched-a")
    b = await cluster.make("sched-b")
    # both caught up with the same log before either decides: both pick the same device
    await a.start()
    await b.start()
    cluster.run(a)
    cluster.run(b)

    def settled() -> bool:
        done = a.outcomes["completed"] + b.outcomes["completed"]
        undone = a.outcomes["compensated"] + b.outcomes["compensated"]
        return done == 1 and undone == 1

    await assert_eventually(settled, timeout_s=15)
    winner, loser = (a, b) if a.outcomes["completed"] else (b, a)
    assert winner.outcomes["compensated"] == 0 and loser.outcomes["completed"] == 0

    claim = await cluster.claim(claim_name)
    assert claim.status.allocation is not None
    assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid]
    assert (await cluster.get_pod("pod-0")).spec.node_name == "node-0"
    history = await cluster.store.events(cluster.store.subject("ResourceClaim", "default", claim_name))
    allocated = [e for e in history if isinstance(e.data, ClaimAllocated)]
    assert len(allocated) == 1 and allocated[0].correlation_id.startswith(winner.instance)

    # the loser's trail, as `draflow log` shows it
    text = await _draflow_log(settings, "Saga._.>")
    lines = [ln for ln in text.splitlines() if f"{loser.instance}-ps-" in ln]
    types = [ln.split()[3] for ln in lines]
    assert types[0] == "SagaStarted" and "SagaStepFailed" in types, text
    assert types[-2:] == ["SagaStepCompensated", "SagaCompensated"], text
    assert types.count("SagaStepCompensated") == 2  # release (prebind), then unreserve (reserve)
    winner_lines = [ln for ln in text.splitlines() if f"{winner.instance}-ps-" in ln]
    assert winner_lines[-1].split()[3] == "SagaCompleted"


async def test_scheduler_killed_mid_saga_resumes_without_double_allocation(
    cluster: Cluster, settings: Settings
) -> None:
    pods, devices = 24, 4
    await cluster.nodes(8, devices=devices)  # 32 devices for 24 pods
    claims = [(await cluster.pod(f"pod-{i}"))[1] for i in range(pods)]
    store = cluster.store
    first = await _spawn(settings)
    try:
        # kill the moment the first claim allocation is stored (the stream republishes it): the
        # other sagas are mid-flight then. Polling the log instead saw it too late on a fast machine.
        allocated = asyncio.Event()

        async def on_stored(msg: Msg) -> None:
            if (msg.headers or {}).get("Draflow-Type") == "ClaimAllocated" and not allocated.is_set():
                first.send_signal(signal.SIGKILL)
                allocated.set()

        sub = await store.nc.subscribe(f"{stored_prefix(settings.root)}.ResourceClaim.>", cb=on_stored)
        try:
            await asyncio.wait_for(allocated.wait(), 30)
        finally:
            await sub.unsubscribe()
        await asyncio.wait_for(first.wait(), 10)
        unfinished = [
            r
            async for records in store.last_per_subject(f"{settings.root}.ev.Saga._.*")
            for r in records
            if r.header("Draflow-Type") not in TERMINAL_SAGA_EVENTS
        ]
        assert unfinished, "the kill should leave sagas mid-flight"
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()
    second = await _spawn(settings)
    try:

        async def all_bound() -> list[Pod]:
            items, _ = await cluster.api.list("Pod", namespace="default")
            got = [decode_stored(i) for i in items]
            assert all(isinstance(p, Pod) and p.spec.node_name for p in got), "not all bound yet"
            return [p for p in got if isinstance(p, Pod)]

        bound = await assert_eventually(all_bound, timeout_s=60, interval_s=0.2)
        assert len(bound) == pods

        # every saga finishes (SagaCompleted follows PodBound a moment later), nothing owed; the
        # sagas the kill interrupted complete forward: resuming them must not fail and compensate
        async def all_sagas_finished() -> dict[str, list[str]]:
            heads = [
                r async for records in store.last_per_subject(f"{settings.root}.ev.Saga._.*") for r in records
            ]
            open_ = [r.subject for r in heads if r.header("Draflow-Type") not in TERMINAL_SAGA_EVENTS]
            assert heads and not open_, {s: [e.type for e in await store.events(s)] for s in open_}
            return {r.subject: [e.type for e in await store.events(r.subject)] for r in heads}

        trails = await assert_eventually(all_sagas_finished, timeout_s=30, interval_s=0.2)
        failed = {s: t for s, t in trails.items() if "SagaStepFailed" in t}
        assert not failed, f"{failed}\n{(settings.data_dir / 'scheduler.stderr').read_text()}"
        # no device allocated twice; every allocation belongs to a bound pod that reserves it
        by_uid = {p.metadata.uid: p for p in bound}
        used: Counter[tuple[str, str, str]] = Counter()
        for name in claims:
            claim = await cluster.claim(name)
            assert isinstance(claim, ResourceClaim)
            alloc = claim.status.allocation
            assert alloc is not None, f"{name} not allocated"
            for r in alloc.devices.results:
                used[(r.driver, r.pool, r.device)] += 1
            (consumer,) = claim.status.reserved_for
            assert by_uid[consumer.uid].spec.node_name == alloc.devices.results[0].pool
        assert max(used.values()) == 1 and len(used) == pods
        # the log agrees: each claim ends allocated exactly once (any allocation a compensation
        # undid is followed by its ClaimDeallocated)
        net: Counter[str] = Counter()
        for name in claims:
            for e in await store.events(store.subject("ResourceClaim", "default", name)):
                net[name] += isinstance(e.data, ClaimAllocated) - isinstance(e.data, ClaimDeallocated)
        assert set(net.values()) == {1}, net
        second.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), 10) == 0
    finally:
        if second.returncode is None:
            second.kill()
            await second.wait()
