"""A replicated cluster survives losing any one nats-server under churn (``Procfile.cluster``).

Three nats-servers in a JetStream cluster, the stream replicated three times, every service
connected with all three URLs, each its own process. Mid-churn the run SIGKILLs the server that
leads the stream: the remaining two elect a new leader, the services fail over, and a Deployment
scaled while the old leader is down still gets every pod Running. The server then comes back and
catches up (its replica current, no lag). Nothing acknowledged before the kill is lost (the log's
first messages are byte for byte the same afterwards), no device is allocated twice, and every
invariant of the chaos suite holds. ``test_cluster_chaos_run`` (``-m slow``) kills at random,
one of the three servers among the services.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.ports import Ports
from tests.chaos.procfile import ProcSystem
from tests.chaos.run import NS, ChaosRun, stream_info
from tests.chaos.test_chaos import SHORT, chaos, seed
from tests.helpers import free_port_offset
from tests.paths import ROOT

PROCFILE = ROOT / "Procfile.cluster"
SERVERS = ["nats1", "nats2", "nats3"]
SERVICES = [n for n in SHORT if n != "nats"]


async def leader(events: EventStore, stream: str) -> str:
    """The Procfile name of the server leading ``stream`` (server ``draflow-N`` is ``natsN``)."""
    info = stream_info((await events.nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=10)).data)
    return "nats" + info["cluster"]["leader"].rsplit("-", 1)[1]


async def caught_up(events: EventStore, stream: str, server: str) -> bool:
    info = stream_info((await events.nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=10)).data)
    name = f"draflow-{server.removeprefix('nats')}"
    cluster = info["cluster"]
    if cluster.get("leader") == name:
        return True
    replica = next((r for r in cluster.get("replicas", []) if r["name"] == name), None)
    return replica is not None and replica.get("current") is True and not replica.get("lag")


def exits(system: ProcSystem) -> str:
    """What the processes that ended by themselves said last."""
    return "\n".join(f"== {n} (exit {code})\n{system.tail(n, 1500)}" for n, code in system.exited().items())


async def log_prefix(events: EventStore, to_seq: int) -> list[tuple[int, str, bytes]]:
    out: list[tuple[int, str, bytes]] = []
    async for batch in events.read_raw(to_seq=to_seq):
        out += [(r.seq, r.subject, r.data) for r in batch]
    return out


async def test_losing_the_stream_leader_mid_churn(tmp_path: Path) -> None:
    offset = free_port_offset()
    data = tmp_path / "data"
    system = ProcSystem(PROCFILE, data, offset, SERVERS + SERVICES)
    settings = Settings(nats_url=Ports(offset).cluster_urls(3), data_dir=data, role="cli")
    nodes = ["node-1", "node-2"]
    run = ChaosRun(system, settings, killable=SERVICES, nodes=nodes, capacity=12, seed=seed())
    system.start_all()
    try:
        await run.start(timeout_s=180)
        events = run.events
        assert events is not None
        info = stream_info(
            (await events.nc.request(f"$JS.API.STREAM.INFO.{settings.stream}", b"", timeout=10)).data
        )
        assert info["config"]["num_replicas"] == 3 and len(info["cluster"]["replicas"]) == 2

        await run.churn(8)
        victim = await leader(events, settings.stream)
        before = await events.stream_last_seq()
        acknowledged = await log_prefix(events, before)
        await asyncio.to_thread(system.kill, victim)
        killed_at = time.monotonic()
        run.figures.kills[victim] += 1

        # the services keep scheduling with one server gone: a new size, every pod Running
        size = run.rng.randint(3, 10)
        await run.scale_until_accepted(size)
        await run.wait(
            lambda: (
                sum(p.status.phase == "Running" for p in run.rt_().items("Pod", NS)) == size
                and len(run.rt_().items("Pod", NS)) == size
            ),
            120,
            f"{size} pods Running without {victim}",
        )
        failover_s = time.monotonic() - killed_at
        assert system.exited() == {}, exits(system)
        new_leader = await leader(events, settings.stream)
        assert new_leader != victim
        await run.churn(6)

        system.start(victim)  # it comes back and catches up
        deadline = time.monotonic() + 120
        while not await caught_up(events, settings.stream, victim):
            assert time.monotonic() < deadline, f"{victim} did not catch up"
            await asyncio.sleep(0.5)

        assert system.exited() == {}, exits(system)  # nothing ended by itself (converge restarts all)
        problems = await run.converge(run.rng.randint(1, run.capacity))
        print(
            f"{run.figures.report()}; leader {victim} killed, {new_leader} took over, pods Running "
            f"again {failover_s:.1f} s after the kill"
        )
        assert problems == [], "\n".join(problems)
        assert await log_prefix(events, before) == acknowledged  # no acknowledged event lost
    finally:
        await run.stop()
        system.stop_all()


@pytest.mark.slow
async def test_cluster_chaos_run(tmp_path: Path) -> None:
    """Random kills among the services and the three servers (one at a time)."""
    run = await chaos(tmp_path, PROCFILE, SERVERS + SERVICES, duration_s=180, capacity=12, cluster=3)
    assert any(run.figures.kills[s] for s in SERVERS)
