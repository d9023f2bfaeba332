"""A replica answering for a leaderless stream group is not a reset (a three-server cluster).

While a JetStream cluster elects a stream's leader (a restarted server rejoining can set one off),
nats-server lets each member of the group answer ``STREAM.INFO`` with its own copy, which may end
a message or more before what the leader had committed and the services had already read. Services
took that for a stream "ending before their position" and stopped with exit 3 (the leader-loss
chaos test found them). Such an answer says ``cluster.leader: ""``: the reset check asks again
later instead; a leader's answer decides once it has gone on saying so for a few seconds
(``infra.shortfall``: an answer of a moment may lag on a loaded machine too).

A service starting meanwhile asked ``STREAM.INFO`` once for the position to fold up to; no answer
within 10 s (the election not over on a loaded machine) failed its start. It asks again now, for as
long as its start may take (``stream_last_seq(wait_s=...)``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import nats.errors
import pytest

from draflow.infra.config import Settings
from draflow.infra.errors import StoreUnavailable, StreamReset
from draflow.infra.eventstore import EventStore
from draflow.infra.natsd import LocalNatsServer
from draflow.infra.ports import Ports
from draflow.infra.projection_store import ProjectionStore
from tests.chaos.procfile import ProcSystem
from tests.conftest import settings_for
from tests.helpers import free_port_offset
from tests.paths import ROOT

pytestmark = pytest.mark.timeout(180)


async def leaderless(events: EventStore, want: bool, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if (await events.stream_status()).leaderless == want:
                return
        except StoreUnavailable:
            pass  # no answer while the servers sort themselves out
        assert time.monotonic() < deadline, f"STREAM.INFO never answered with leaderless={want}"
        await asyncio.sleep(0.5)


async def reset_within(check: Callable[[], Awaitable[object]], timeout_s: float) -> None:
    """``check`` is not believed at once (``StoreUnavailable``), then raises ``StreamReset``."""
    deadline = time.monotonic() + timeout_s
    with pytest.raises(StoreUnavailable):
        await check()
    while True:
        try:
            await check()
        except StoreUnavailable:
            assert time.monotonic() < deadline, "never taken for a reset"
            await asyncio.sleep(0.5)
            continue
        except StreamReset as exc:
            assert "it ends before that position" in str(exc)
            return
        raise AssertionError("the shortfall was not reported")


async def test_a_lagging_replica_of_a_leaderless_group_is_no_reset(tmp_path: Path) -> None:
    offset = free_port_offset()
    data = tmp_path / "data"
    system = ProcSystem(ROOT / "Procfile.cluster", data, offset, ["nats1", "nats2", "nats3"])
    settings = Settings(nats_url=Ports(offset).cluster_urls(3), data_dir=data, role="cli")
    system.start_all()
    events: EventStore | None = None
    db = await ProjectionStore.open(tmp_path / "projections.db", [])
    try:
        events = await EventStore.open(settings, "leaderless-probe")
        await leaderless(events, False)
        end = (await events.check_stream(0)).last_seq
        await db.verify_stream(events, "widgets")  # records the stream's identity
        # a projection consumer that has applied one event more than the replica's copy will hold
        await db.db.execute("INSERT INTO checkpoints (consumer, seq) VALUES ('widgets', ?)", (end + 1,))
        for name in ("nats2", "nats3"):  # nats1 alone: no quorum, no leader
            system.kill(name)
        await leaderless(events, True)
        # as if this process had read one event more than the replica's copy holds
        with pytest.raises(StoreUnavailable, match="no leader"):
            await events.check_stream(end + 1)
        assert events.reset is None
        with pytest.raises(StoreUnavailable, match="no leader"):
            await db.verify_stream(events, "widgets")
        for name in ("nats2", "nats3"):
            system.start(name)
        await leaderless(events, False)
        # the leader says so, and goes on saying so for the confirmation time: that is a reset
        await reset_within(lambda: db.verify_stream(events, "widgets"), 15)
        await reset_within(lambda: events.check_stream(end + 1), 15)
    finally:
        await db.close()
        if events is not None:
            await events.close()
        system.stop_all()


async def test_a_starting_service_waits_for_an_answer_about_the_streams_end(
    own_nats_server: LocalNatsServer, tmp_path: Path
) -> None:
    """No JetStream answer for longer than a request's 10 s (here: the server away): once, it is
    an error; with ``wait_s`` it is asked again until the answer comes."""
    events = await EventStore.open(settings_for(own_nats_server, tmp_path / "data"), "starting")
    try:
        own_nats_server.stop()
        with pytest.raises(nats.errors.TimeoutError):
            await events.stream_last_seq()
        waiting = asyncio.create_task(events.stream_last_seq(wait_s=60))
        await asyncio.sleep(11)  # its first request goes unanswered
        assert not waiting.done()
        own_nats_server.start()
        assert await asyncio.wait_for(waiting, 30) == 0
    finally:
        await events.close()
