"""The shared service runner: waits for nats-server, works, exits 0 on SIGTERM; the launcher."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from draflow.infra.config import Settings
from draflow.infra.errors import ConcurrencyError
from draflow.infra.eventstore import AppendRequest, EventStore
from draflow.infra.natsd import LocalNatsServer, free_port
from draflow.infra.service import ServiceContext, quiet_when_stopping, serve
from tests.conftest import settings_for
from tests.paths import ROOT
from tests.processes import Proc
from tests.widgets import WidgetCreated, WidgetResized

TRACE_SERVICES = "tests.trace_services"


def test_service_waits_for_nats_then_stops_on_sigterm(tmp_path: Path) -> None:
    server = LocalNatsServer(tmp_path / "store", port=free_port())
    settings = settings_for(server, tmp_path / "data")
    env = {"DRAFLOW_LOG_LEVEL": "INFO"}
    producer = Proc(settings, TRACE_SERVICES, ["producer"], env, merge_stderr=True)
    try:
        # honcho starts services and nats-server at the same time: the service's third connection
        # attempt failing proves it went on retrying after failures instead of giving up
        for _ in range(3):
            producer.expect("producer: disconnected from NATS", anywhere=True)
        assert producer.proc.poll() is None, "the service gave up instead of retrying"
        server.start()
        producer.expect("APPENDED")
        producer.proc.send_signal(signal.SIGTERM)
        assert producer.wait(timeout_s=5) == 0
    finally:
        if producer.proc.poll() is None:
            producer.proc.kill()
            producer.wait()
        server.stop()


def test_sigterm_while_waiting_for_nats_exits_cleanly(tmp_path: Path) -> None:
    settings = Settings(nats_url=f"nats://127.0.0.1:{free_port()}", data_dir=tmp_path, stream="S", root="s")
    waiting = Proc(settings, TRACE_SERVICES, ["producer"], {"DRAFLOW_LOG_LEVEL": "INFO"}, merge_stderr=True)
    waiting.expect("producer: connecting to", anywhere=True)  # up, and retrying the connection
    time.sleep(0.3)
    waiting.proc.send_signal(signal.SIGTERM)
    assert waiting.wait(timeout_s=5) == 0


def test_launcher_runs_nats_server_from_the_environment(tmp_path: Path) -> None:
    """What the Procfile's first line does: nats-server -js on the URL's port, store in the data dir,
    started as the launcher's child (the launcher creates the streams as the admin, then waits)."""
    port = free_port()
    env = {**os.environ, "DRAFLOW_NATS_URL": f"nats://127.0.0.1:{port}", "DRAFLOW_DATA_DIR": str(tmp_path)}
    pipe = subprocess.PIPE
    # the launcher makes the streams as the admin, then says so
    launcher = [sys.executable, "-m", "draflow.infra.natsd"]
    proc = subprocess.Popen(launcher, cwd=ROOT, env=env, stdout=pipe, stderr=pipe)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().decode().startswith("natsd: stream DRAFLOW ready")
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        cmdline = Path(f"/proc/{children[0]}/cmdline").read_bytes().split(b"\0")
        assert Path(cmdline[0].decode()).name == "nats-server"
        conf = Path(cmdline[cmdline.index(b"-c") + 1].decode()).read_text()
        assert f"127.0.0.1:{port}" in conf and (tmp_path / "nats" / "jetstream").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()


async def test_append_many_reports_each_outcome(event_store: EventStore) -> None:
    a = event_store.subject("Widget", "d", "a")
    (sa,) = await event_store.append(a, WidgetCreated(name="a"), expected_last_seq=0)
    reqs = [
        AppendRequest(a, [WidgetResized(size=1)], sa),  # fine
        AppendRequest(event_store.subject("Widget", "d", "b"), [WidgetCreated(name="b")], 0),
        AppendRequest(a, [WidgetResized(size=2)], sa),  # stale: the first request moved `a` on
        AppendRequest(
            event_store.subject("Widget", "d", "c"), [WidgetCreated(name="c"), WidgetResized(size=3)], 0
        ),
    ]
    out = await event_store.append_many(reqs, return_exceptions=True)
    assert out[0] == (sa + 1,) and out[1] == (sa + 2,)
    assert isinstance(out[2], ConcurrencyError)
    assert out[3] == (sa + 3, sa + 4)
    try:
        await event_store.append_many([AppendRequest(a, [WidgetResized(size=9)], sa)])
    except ConcurrencyError:
        pass
    else:
        raise AssertionError("a stale request must raise without return_exceptions")


async def test_work_cancelled_from_inside_is_a_failure_not_a_clean_stop(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``CancelledError`` that escapes ``main`` without anyone asking for it (grpc raises one in
    the caller when a channel is closed under a call) used to end the process with exit 0 and
    ``stopped``, which no supervisor restarts: a kubelet vanished that way under chaos."""

    async def main(ctx: ServiceContext) -> None:
        await asyncio.sleep(0)
        raise asyncio.CancelledError  # what an awaited library call raised

    caplog.set_level(logging.ERROR, logger="draflow.infra.service")
    assert await serve("selfcancel", main, settings) == 1
    assert "selfcancel: stopped: its work was cancelled from inside" in caplog.text


async def test_a_connection_reset_while_stopping_is_one_line_not_a_traceback(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """honcho stops nats-server with everything else; the NATS client's read task then fails
    closing a socket the server already reset, an error no task awaits. While stopping that is
    expected and said in one line; while running, and for any other error, asyncio reports it."""
    installed = []

    async def main(ctx: ServiceContext) -> None:
        installed.append(asyncio.get_running_loop().get_exception_handler())

    assert await serve("quiet", main, settings) == 0
    (handle,) = installed
    assert handle is not None and "quiet_when_stopping" in handle.__qualname__

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    handle = quiet_when_stopping(stop)
    reset = {
        "message": "Task exception was never retrieved",
        "exception": ConnectionResetError(104, "Connection reset by peer"),
    }
    caplog.set_level(logging.INFO)
    handle(loop, reset)  # running: asyncio's own report
    assert "Task exception was never retrieved" in caplog.text
    caplog.clear()
    stop.set()
    handle(loop, reset)
    assert "Task exception was never retrieved" not in caplog.text
    assert "connection closed by the server while stopping: [Errno 104]" in caplog.text
    handle(loop, {"message": "something else broke", "exception": ValueError("x")})
    assert "something else broke" in caplog.text
