"""Test helpers shared by every test folder: polling assertions instead of sleeps."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
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


def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 10.0, interval_s: float = 0.02) -> None:
    """Synchronous polling (for subprocess-driven tests)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        time.sleep(interval_s)


def free_port_offset(metrics_slots: int = 20) -> int:
    """A ``DRAFLOW_PORT_OFFSET`` whose every port (NATS, OTLP gRPC/HTTP, the Kubernetes API, the first
    metrics slots) is free right now: a system started with it shares no port with anything else on
    this machine."""
    import random
    import socket

    from infra.ports import Ports

    for _ in range(200):
        ports = Ports(random.randrange(10_000, 50_000))
        metrics = [ports.metrics(slot) for slot in range(1, metrics_slots)]
        wanted = [ports.nats, ports.otlp_grpc, ports.otlp_http, ports.kube_api, *metrics]
        try:
            for port in wanted:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return ports.offset
    raise RuntimeError("no free port offset found")
