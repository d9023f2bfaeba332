"""A chaos run: a Deployment of one-GPU pods scaled up and down while services are SIGKILLed.

The run applies a ResourceClaimTemplate and a Deployment whose pods each claim one
``gpu.example.com`` GPU, rescales it every second or two, and every 3-6 s SIGKILLs one process
picked at random (nats-server included), starting it again 0.5-2 s later. When the time is up
every process runs again, the Deployment gets its final size, and the run measures how long the
system takes until every invariant (``invariants.check``) holds, and ``draflow check``'s rules must
have held over the whole log (``log_check``). It reads the system like the CLI
does: the ``cli`` credential, a cache folded from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import nats.errors

from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.cli.checker import check_records
from draflow.services.runtime.controller import Runtime
from draflow.services.runtime.protocol import StatusError
from tests.chaos import invariants
from tests.chaos.procfile import ProcSystem
from tests.shells import start_runtime

NS = "chaos"


def manifests(replicas: int) -> list[dict[str, Any]]:
    claim = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}
    pod = {
        "metadata": {"labels": {"app": "churn"}},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": NS},
            "spec": {"spec": claim},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "churn", "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "churn"}}, "template": pod},
        },
    ]


@dataclass
class Figures:
    seed: int
    duration_s: float = 0.0
    kills: Counter[str] = field(default_factory=Counter)
    scale_changes: int = 0
    failed_requests: int = 0
    convergence_s: float = 0.0
    events: int = 0
    final_replicas: int = 0
    checked_events: int = 0  # events draflow check held the invariants against

    def report(self) -> str:
        kills = ", ".join(f"{name} {n}" for name, n in sorted(self.kills.items())) or "none"
        total = sum(self.kills.values())
        return (
            f"chaos run (seed {self.seed}): {self.duration_s:.0f} s of churn, {total} kills ({kills}), "
            f"{self.scale_changes} scale changes ({self.failed_requests} refused while a service was "
            f"down), converged to {self.final_replicas} Running pods in {self.convergence_s:.1f} s, "
            f"{self.events} events in the log, {self.checked_events} checked by draflow check"
        )


class ChaosRun:
    def __init__(
        self,
        system: ProcSystem,
        settings: Settings,
        *,
        killable: list[str],
        nodes: list[str],
        capacity: int,
        seed: int,
    ) -> None:
        self.system = system
        self.settings = settings
        self.killable = killable
        self.nodes = nodes
        self.capacity = capacity
        self.rng = random.Random(seed)
        self.figures = Figures(seed=seed)
        self.rt: Runtime | None = None
        self.events: EventStore | None = None
        self.on_kill: Callable[[str], Awaitable[None]] | None = None

    async def start(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.rt, self.events = await start_runtime(self.settings, "chaos-probe")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        await self.wait(
            lambda: len(self.rt_().items("ResourceSlice")) >= len(self.nodes), 120, "the nodes' slices"
        )
        await self.scale(0)

    def rt_(self) -> Runtime:
        assert self.rt is not None
        return self.rt

    async def stop(self) -> None:
        if self.rt is not None:
            await self.rt.stop()
        if self.events is not None:
            await self.events.close()

    async def scale(self, replicas: int) -> bool:
        try:
            results = await self.rt_().api.apply(manifests(replicas))
        except (StatusError, nats.errors.Error, TimeoutError, OSError):
            self.figures.failed_requests += 1
            return False
        if any(r.error is not None for r in results):
            self.figures.failed_requests += 1
            return False
        return True

    async def scale_until_accepted(self, replicas: int, attempts: int = 120) -> None:
        for _ in range(attempts):
            if await self.scale(replicas):
                return
            await asyncio.sleep(0.5)
        raise AssertionError(f"scaling to {replicas} was refused {attempts} times")

    async def _kills(self, until: float) -> None:
        while True:
            await asyncio.sleep(self.rng.uniform(3.0, 6.0))
            if time.monotonic() >= until:
                return
            name = self.rng.choice(self.killable)
            await self.kill_and_restart(name)

    async def kill_and_restart(self, name: str) -> None:
        await asyncio.to_thread(self.system.kill, name)
        self.figures.kills[name] += 1
        if self.on_kill is not None:
            await self.on_kill(name)
        await asyncio.sleep(self.rng.uniform(0.5, 2.0))
        self.system.start(name)

    async def churn(self, duration_s: float) -> None:
        """Rescale every 1-2 s while processes are killed; returns when the time is up."""
        start = time.monotonic()
        until = start + duration_s
        killer = asyncio.create_task(self._kills(until))
        try:
            while time.monotonic() < until:
                if await self.scale(self.rng.randint(0, self.capacity)):
                    self.figures.scale_changes += 1
                await asyncio.sleep(self.rng.uniform(1.0, 2.0))
            await killer
        finally:
            killer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await killer
        self.figures.duration_s += time.monotonic() - start

    def problems(self) -> list[str]:
        rt = self.rt_()
        return invariants.check(
            rt.items("Pod", NS), rt.items("ResourceClaim", NS), self.system.data_dir, self.nodes, 0
        )

    async def converge(self, replicas: int, timeout_s: float = 180.0) -> list[str]:
        """Every process up, the final size applied; wait until every invariant holds (or time
        out); returns what still does not hold (empty: converged) and records the time taken."""
        for name in self.system.commands:
            if not self.system.alive(name):
                self.system.start(name)
        start = time.monotonic()
        await self.scale_until_accepted(replicas)
        self.figures.final_replicas = replicas
        last: list[str] = ["not checked yet"]
        while time.monotonic() - start < timeout_s:
            pods = self.rt_().items("Pod", NS)
            last = self.problems()
            if len(pods) != replicas:
                last.append(f"{len(pods)} pods, want {replicas}")
            if not last:
                break
            await asyncio.sleep(0.25)
        self.figures.convergence_s = time.monotonic() - start
        if not last:
            last = await self.final_checks()
        return last

    async def final_checks(self) -> list[str]:
        events = self.events
        assert events is not None
        self.figures.events = await events.stream_last_seq()
        reply = await events.nc.request(f"$JS.API.STREAM.INFO.{self.settings.dlq_stream}", b"", timeout=10)
        count = invariants.dlq_count(reply.data)
        problems = [f"{count} dead letter(s) in {self.settings.dlq_stream}"] if count else []
        return problems + await self.log_check()

    async def log_check(self) -> list[str]:
        """``draflow check`` over the whole run's log: every DRA invariant held at every event."""
        events = self.events
        assert events is not None
        records: list[Any] = []
        async for batch in events.read_raw():
            records.extend(batch)
        checker = check_records(records, events.root)
        self.figures.checked_events = checker.events
        return [
            f"draflow check: {rule} broken at seq {b.broken_by.seq} ({b.broken_by.type} by "
            f"{b.broken_by.actor}): {b.finding.message}"
            for rule, b in checker.first_violations().items()
        ]

    async def wait(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                exited = self.system.exited()  # a process that ended by itself is the likely why
                gone = f" ({', '.join(f'{n} exited {c}' for n, c in exited.items())})" if exited else ""
                raise AssertionError(f"{what}: not within {timeout_s}s{gone}")
            await asyncio.sleep(0.2)


def stream_info(reply: bytes) -> dict[str, Any]:
    info: dict[str, Any] = json.loads(reply)
    if info.get("error"):
        raise AssertionError(f"stream info: {info['error']}")
    return info
