"""The gRPC server on a real socket with a fixed source: rate limit, socket handling, errors.

(The answers themselves are the kubelet's: test_e2e.py and test_restart.py run them end to end.)
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket as sockets
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from draflow.services.kubelet.podresources import metrics
from draflow.services.kubelet.podresources.ratelimit import TokenBucket
from draflow.services.kubelet.podresources.server import (
    MAX_SOCKET_PATH,
    STOPPING,
    PodResourcesServer,
    SocketPathError,
    short_path,
)
from draflow.services.kubelet.podresources.v1 import api_pb2 as pb
from tests.services.kubelet.podresources.cluster import allocatable, get_pod, list_pods, rpc_error

pytestmark = pytest.mark.kep3695

LISTED = pb.ListPodResourcesResponse(pod_resources=[pb.PodResources(name="p", namespace="ns")])


class Fixed:
    """A source answering with fixed messages (the server under test only moves bytes); records
    the threads its state readers ran on (they must run on the event loop's)."""

    def __init__(self) -> None:
        self.threads: set[threading.Thread] = set()

    def list_bytes(self) -> bytes:
        self.threads.add(threading.current_thread())
        return LISTED.SerializeToString()

    def get_bytes(self, namespace: str, name: str) -> bytes | None:
        self.threads.add(threading.current_thread())
        if (namespace, name) != ("ns", "p"):
            return None
        return pb.GetPodResourcesResponse(pod_resources=LISTED.pod_resources[0]).SerializeToString()

    def allocatable_bytes(self) -> bytes:
        self.threads.add(threading.current_thread())
        return pb.AllocatableResourcesResponse().SerializeToString()

    def cached_list_bytes(self) -> bytes | None:
        return LISTED.SerializeToString()  # served on the server's thread

    def cached_allocatable_bytes(self) -> bytes | None:
        return None  # built on the event loop


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="prs-", dir="/tmp") as d:
        yield Path(d)


async def test_rate_limit_refuses_with_resource_exhausted(short_dir: Path) -> None:
    server = PodResourcesServer(Fixed(), short_dir / "kubelet.sock", qps=0.01, burst=3)
    await server.start()
    try:
        before = dict(metrics._counts)
        for _ in range(3):  # the burst
            assert await list_pods(server.socket_path) == LISTED
        err = await rpc_error(list_pods(server.socket_path))
        assert (err.code(), err.details()) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
        err = await rpc_error(get_pod(server.socket_path, "ns", "p"))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # refused calls count in no endpoint metric (upstream's interceptor refuses before the handler)
        key = ("requests", "list", "v1")
        assert metrics._counts[key] - before.get(key, 0) == 3
    finally:
        await server.stop()


async def test_default_burst_is_ten_calls(short_dir: Path) -> None:
    server = PodResourcesServer(Fixed(), short_dir / "kubelet.sock")
    assert (server.limiter.qps, server.limiter.burst) == (100, 10)  # the kubelet's defaults
    server.limiter = TokenBucket(100, 10, clock=lambda: 0.0)  # no refill while the test runs
    await server.start()
    try:
        for _ in range(8):
            assert await list_pods(server.socket_path) == LISTED
        got = await get_pod(server.socket_path, "ns", "p")
        assert got.pod_resources.name == "p"
        err = await rpc_error(get_pod(server.socket_path, "other", "p"))
        assert (err.code(), err.details()) == (
            grpc.StatusCode.NOT_FOUND,
            "pod p in namespace other not found",
        )
    finally:
        await server.stop()


async def test_socket_mode_stale_socket_and_clean_stop(short_dir: Path) -> None:
    path = short_dir / "pod-resources" / "kubelet.sock"
    path.parent.mkdir()
    stale = sockets.socket(sockets.AF_UNIX)
    stale.bind(str(path))  # what a killed kubelet leaves behind
    stale.close()
    server = PodResourcesServer(Fixed(), path)
    await server.start()
    try:
        assert stat.S_ISSOCK(path.lstat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert (await allocatable(path)) == pb.AllocatableResourcesResponse()
    finally:
        await server.stop()
    assert not path.exists()


async def test_refuses_a_path_that_is_not_a_socket_or_too_long(short_dir: Path) -> None:
    path = short_dir / "kubelet.sock"
    path.write_text("not a socket")
    with pytest.raises(SocketPathError, match="exists and is not a socket"):
        await PodResourcesServer(Fixed(), path).start()
    assert path.read_text() == "not a socket"
    long = short_dir / ("d" * (MAX_SOCKET_PATH - len(os.fsencode(short_dir)))) / "kubelet.sock"
    with pytest.raises(
        SocketPathError, match=r"a unix socket path may have at most 107: .*--pod-resources-socket"
    ):
        await PodResourcesServer(Fixed(), long).start()


async def test_too_long_default_path_links_to_a_short_socket(short_dir: Path) -> None:
    deep = short_dir / ("d" * 90) / "kubelet" / "node-1" / "pod-resources" / "kubelet.sock"
    server = PodResourcesServer(Fixed(), deep, link_if_too_long=True)
    assert server.bound_path == short_path(deep) and len(os.fsencode(server.bound_path)) <= MAX_SOCKET_PATH
    deep.parent.mkdir(parents=True)
    deep.symlink_to(server.bound_path)  # left by a killed kubelet: replaced
    await server.start()
    try:
        assert deep.is_symlink() and deep.resolve() == server.bound_path
        assert stat.S_IMODE(server.bound_path.stat().st_mode) == 0o600
        assert await list_pods(deep.resolve()) == LISTED
    finally:
        await server.stop()
    assert not deep.is_symlink() and not server.bound_path.exists()


async def test_state_is_read_on_the_event_loop(short_dir: Path) -> None:
    source = Fixed()
    server = PodResourcesServer(source, short_dir / "kubelet.sock")
    await server.start()
    try:
        assert await list_pods(server.socket_path) == LISTED  # cached: no trip through the loop
        assert source.threads == set()
        assert (await get_pod(server.socket_path, "ns", "p")).pod_resources.name == "p"
        assert await allocatable(server.socket_path) == pb.AllocatableResourcesResponse()  # built
        assert source.threads == {threading.current_thread()}
    finally:
        await server.stop()


async def test_a_call_waiting_for_the_loop_when_the_server_stops_is_unavailable(
    short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = Fixed()
    server = PodResourcesServer(source, short_dir / "kubelet.sock")
    await server.start()
    idle = asyncio.new_event_loop()  # never runs: a call needing the loop waits until stop()
    server._loop = idle
    try:
        waiting = asyncio.create_task(rpc_error(allocatable(server.socket_path)))
        for _ in range(500):
            if server._waiting:
                break
            await asyncio.sleep(0.01)
        assert server._waiting
        await server.stop(grace_s=5)
        err = await waiting
        assert (err.code(), err.details()) == (grpc.StatusCode.UNAVAILABLE, STOPPING)
        # the loop runs late: it finds the call answered and leaves it alone (no second answer)
        with caplog.at_level(logging.ERROR):
            await asyncio.to_thread(idle.run_until_complete, asyncio.sleep(0))
        assert "answered twice" not in caplog.text and source.threads == set()  # nor read the state
    finally:
        idle.close()
        await server.stop()


class Broken(Fixed):
    def allocatable_bytes(self) -> bytes:
        raise RuntimeError("the state cannot be read")


async def test_a_closed_loop_is_unavailable_and_a_failing_source_is_unknown(short_dir: Path) -> None:
    server = PodResourcesServer(Broken(), short_dir / "kubelet.sock")
    await server.start()
    try:
        err = await rpc_error(allocatable(server.socket_path))  # the source's own error: not hidden
        assert err.code() == grpc.StatusCode.UNKNOWN
        closed = asyncio.new_event_loop()
        closed.close()
        server._loop = closed  # the kubelet's loop has ended
        err = await rpc_error(get_pod(server.socket_path, "ns", "p"))
        assert (err.code(), err.details()) == (grpc.StatusCode.UNAVAILABLE, STOPPING)
        assert await list_pods(server.socket_path) == LISTED  # cached answers need no loop
    finally:
        await server.stop()


def test_token_bucket_refills_at_qps_up_to_burst() -> None:
    now = [0.0]
    bucket = TokenBucket(10, 2, clock=lambda: now[0])
    assert [bucket.allow() for _ in range(3)] == [True, True, False]
    now[0] += 0.1  # one token back
    assert [bucket.allow(), bucket.allow()] == [True, False]
    now[0] += 10  # never more than the burst
    assert [bucket.allow() for _ in range(3)] == [True, True, False]
    with pytest.raises(ValueError, match="greater than 0"):
        TokenBucket(0, 1)


async def test_a_request_that_is_not_the_message_fails_as_grpcio_fails_it(short_dir: Path) -> None:
    server = PodResourcesServer(Fixed(), short_dir / "kubelet.sock")
    await server.start()
    try:
        before = dict(metrics._counts)
        async with grpc.aio.insecure_channel(server.address) as channel:
            for method in ("List", "Get", "GetAllocatableResources"):
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await channel.unary_unary(f"/v1.PodResourcesLister/{method}")(b"\xff\xff", timeout=10)
                assert (err.value.code(), err.value.details()) == (
                    grpc.StatusCode.INTERNAL,
                    "Exception deserializing request!",
                )
        assert metrics._counts == before  # refused before it counts, like upstream's decoding
        assert await list_pods(server.socket_path) == LISTED
    finally:
        await server.stop()
