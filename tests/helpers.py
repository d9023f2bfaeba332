"""Test helpers shared by every test folder: polling assertions instead of sleeps."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


async def assert_eventually(
    check: Callable[[], Any],
    *,
    timeout_s: float = 10.0,
    interval_s: float = 0.02,
    message: str = "",
) -> Any:
    """Call ``check`` (sync or async) until it returns a truthy value without raising AssertionError.

    Returns that value. On timeout, fails with the last AssertionError (or a falsy-result message),
    so the report says what was still wrong, not just that time ran out.
    """
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result
            last = AssertionError(f"check returned {result!r}")
        except AssertionError as exc:
            last = exc
        if time.monotonic() >= deadline:
            prefix = f"{message}: " if message else ""
            raise AssertionError(f"{prefix}not true within {timeout_s}s; last: {last}") from last
        await asyncio.sleep(interval_s)


async def wait_for_value(
    fetch: Callable[[], Awaitable[T]], predicate: Callable[[T], bool], *, timeout_s: float = 10.0
) -> T:
    """Poll ``fetch()`` until ``predicate`` holds for its result; returns that result."""
    holder: list[T] = []

    async def check() -> bool:
        value = await fetch()
        holder[:] = [value]
        assert predicate(value), f"value {value!r} does not satisfy the predicate"
        return True

    await assert_eventually(check, timeout_s=timeout_s)
    return holder[0]


async def wait_for(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Call ``check`` every 0.2 s until it returns True or a truthy non-list; a list is what is still
    missing, and the failure message shows the last one (``what: [...]``)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last is True or (last and not isinstance(last, list)):
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: {last!r}")


def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 10.0, interval_s: float = 0.02) -> None:
    """Synchronous polling (for subprocess-driven tests)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        time.sleep(interval_s)


def ephemeral_port_start() -> int:
    """The first port the kernel hands out as a connection's local port (Linux's default 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_offset(metrics_slots: int = 20) -> int:
    """A ``DRAFLOW_PORT_OFFSET`` whose every port (NATS and a local cluster's client and route
    ports, OTLP gRPC/HTTP, the Kubernetes API, the first metrics slots) is free right now: a system
    started with it shares no port with anything else on this machine.

    Every port stays below the kernel's ephemeral range where it can: a test that kills a server
    and starts it again needs its port free then too, and a port in that range may meanwhile have
    become the local end of any connection on the machine (a restarted nats-server failed with
    ``address already in use`` on its route port that way)."""
    import random
    import socket

    from draflow.infra.ports import CLUSTER_MAX, METRICS_BASE, Ports

    low = 10_000
    high = ephemeral_port_start() - (METRICS_BASE + metrics_slots)  # the highest port: a metrics slot
    if high <= low + 1000:  # an unusual ephemeral range: anywhere, as before
        high = 50_000
    for _ in range(200):
        ports = Ports(random.randrange(low, high))
        metrics = [ports.metrics(slot) for slot in range(1, metrics_slots)]
        nodes = range(1, CLUSTER_MAX + 1)
        cluster = [*map(ports.cluster_client, nodes), *map(ports.cluster_route, nodes)]
        wanted = [*cluster, ports.otlp_grpc, ports.otlp_http, ports.kube_api, *metrics]
        try:
            for port in wanted:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return ports.offset
    raise RuntimeError("no free port offset found")
