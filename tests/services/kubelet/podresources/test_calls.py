"""The one-thread call server on grpcio's completion queue, on a real socket with grpcio's client:
answers now and later, errors, unknown methods, cancelled calls, many clients at once, stopping."""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from draflow.services.kubelet.podresources.calls import Call, CallServer

pytestmark = pytest.mark.kep3695

ECHO, LATER, BROKEN, SILENT = "/t.S/Echo", "/t.S/Later", "/t.S/Broken", "/t.S/Silent"


class Handlers:
    def __init__(self) -> None:
        self.later: list[Call] = []  # answered by the test, from its own thread
        self.arrived = threading.Event()

    def echo(self, call: Call, request: bytes) -> None:
        if request == b"fail":
            call.fail(grpc.StatusCode.NOT_FOUND, "no such thing")
        else:
            call.reply(request * 2)

    def keep(self, call: Call, request: bytes) -> None:
        self.later.append(call)
        self.arrived.set()

    def broken(self, call: Call, request: bytes) -> None:
        raise RuntimeError("a bug in a handler")

    def table(self) -> dict[str, object]:
        return {ECHO: self.echo, LATER: self.keep, BROKEN: self.broken, SILENT: self.keep}


@pytest.fixture
def served() -> Iterator[tuple[CallServer, Handlers, grpc.Channel]]:
    with tempfile.TemporaryDirectory(prefix="prc-", dir="/tmp") as d:
        handlers = Handlers()
        server = CallServer(handlers.table())  # type: ignore[arg-type]
        address = f"unix:{Path(d) / 's.sock'}"
        assert server.add_port(address)
        server.start()
        channel = grpc.insecure_channel(address)
        try:
            yield server, handlers, channel
        finally:
            channel.close()
            server.stop(grace_s=1)


def rpc(channel: grpc.Channel, method: str) -> grpc.UnaryUnaryMultiCallable:
    return channel.unary_unary(method)  # bytes in, bytes out


def test_answers_now_and_from_another_thread_later(served: tuple[CallServer, Handlers, grpc.Channel]) -> None:
    _, handlers, channel = served
    assert rpc(channel, ECHO)(b"ab", timeout=10) == b"abab"
    with pytest.raises(grpc.RpcError) as err:
        rpc(channel, ECHO)(b"fail", timeout=10)
    assert (err.value.code(), err.value.details()) == (grpc.StatusCode.NOT_FOUND, "no such thing")
    waiting = futures.ThreadPoolExecutor(1).submit(rpc(channel, LATER), b"x", timeout=10)
    assert handlers.arrived.wait(10)
    assert rpc(channel, ECHO)(b"c", timeout=10) == b"cc"  # the server's thread goes on meanwhile
    threading.Thread(target=handlers.later[0].reply, args=(b"answered later",)).start()
    assert waiting.result(10) == b"answered later"


def test_unknown_method_and_a_broken_handler(
    served: tuple[CallServer, Handlers, grpc.Channel], caplog: pytest.LogCaptureFixture
) -> None:
    _, _, channel = served
    with pytest.raises(grpc.RpcError) as err:
        rpc(channel, "/t.S/Nope")(b"", timeout=10)
    assert (err.value.code(), err.value.details()) == (
        grpc.StatusCode.UNIMPLEMENTED,
        "unknown method /t.S/Nope",
    )
    with caplog.at_level(logging.ERROR), pytest.raises(grpc.RpcError) as err:
        rpc(channel, BROKEN)(b"", timeout=10)
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert "a bug in a handler" in (err.value.details() or "")
    assert "/t.S/Broken failed" in caplog.text
    assert rpc(channel, ECHO)(b"still", timeout=10) == b"stillstill"  # the server goes on


def test_a_second_answer_is_dropped(
    served: tuple[CallServer, Handlers, grpc.Channel], caplog: pytest.LogCaptureFixture
) -> None:
    _, handlers, channel = served
    waiting = futures.ThreadPoolExecutor(1).submit(rpc(channel, LATER), b"", timeout=10)
    assert handlers.arrived.wait(10)
    call = handlers.later[0]
    call.reply(b"first")
    with caplog.at_level(logging.ERROR):
        call.fail(grpc.StatusCode.INTERNAL, "second")
    assert waiting.result(10) == b"first"
    assert "answered twice" in caplog.text
    assert rpc(channel, ECHO)(b"z", timeout=10) == b"zz"


def test_a_call_its_client_gave_up_on_is_answered_into_the_void(
    served: tuple[CallServer, Handlers, grpc.Channel],
) -> None:
    server, handlers, channel = served
    with pytest.raises(grpc.RpcError) as err:
        rpc(channel, LATER)(b"", timeout=0.3)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert handlers.arrived.wait(10)
    handlers.later[0].reply(b"too late")  # completes (unsuccessfully) on the server's thread
    assert rpc(channel, ECHO)(b"q", timeout=10) == b"qq"
    begin = time.monotonic()
    server.stop(grace_s=5)  # nothing open any more: no grace needed
    assert time.monotonic() - begin < 4


def test_many_clients_at_once(served: tuple[CallServer, Handlers, grpc.Channel]) -> None:
    _, _, channel = served
    echo = rpc(channel, ECHO)

    def client(i: int) -> int:
        ok = 0
        for n in range(150):
            body = f"{i}:{n}".encode()
            ok += echo(body, timeout=10) == body * 2
        return ok

    with futures.ThreadPoolExecutor(6) as pool:
        assert sum(pool.map(client, range(6))) == 6 * 150


def test_stop_ends_calls_under_way_after_the_grace(caplog: pytest.LogCaptureFixture) -> None:
    with tempfile.TemporaryDirectory(prefix="prc-", dir="/tmp") as d:
        handlers = Handlers()
        server = CallServer(handlers.table())  # type: ignore[arg-type]
        address = f"unix:{Path(d) / 's.sock'}"
        server.add_port(address)
        server.start()
        with grpc.insecure_channel(address) as channel:
            waiting = futures.ThreadPoolExecutor(1).submit(rpc(channel, LATER), b"", timeout=30)
            assert handlers.arrived.wait(10)
            stopping = threading.Thread(target=server.stop, args=(5.0,))
            stopping.start()
            deadline = time.monotonic() + 10
            while not server._stopping and time.monotonic() < deadline:
                time.sleep(0.01)
            with server._lock:  # held while the C server is told to shut down: done now, no new calls
                pass
            with pytest.raises(grpc.RpcError):  # no new calls once stopping
                rpc(channel, ECHO)(b"", timeout=5)
            handlers.later[0].reply(b"within the grace")
            assert waiting.result(10) == b"within the grace"
            stopping.join(10)
            assert not stopping.is_alive()

            # a call nobody answers: cancelled after the grace; stop() gives up on it, says so
            server = CallServer(handlers.table())  # type: ignore[arg-type]
            other = f"unix:{Path(d) / 'other.sock'}"
            server.add_port(other)
            server.start()
            handlers.arrived.clear()
            with grpc.insecure_channel(other) as again:
                silent = futures.ThreadPoolExecutor(1).submit(rpc(again, SILENT), b"", timeout=30)
                assert handlers.arrived.wait(10)
                begin = time.monotonic()
                with caplog.at_level(logging.ERROR):
                    server.stop(grace_s=0.1, cancelled_s=0.5)
                assert time.monotonic() - begin < 4.5  # given up after cancelled_s: no hanging
                assert "calls still open" in caplog.text
                with pytest.raises(grpc.RpcError) as err:
                    silent.result(10)
                assert (err.value.code(), err.value.details()) == (
                    grpc.StatusCode.UNAVAILABLE,
                    "Cancelling all calls",  # the C core's words
                )
