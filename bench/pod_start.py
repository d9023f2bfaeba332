"""Pod start latency on a node: bound → Running (the kubelet's prepare through the driver's plugin).

Real processes on a real JetStream: a local nats-server, the apiserver, the claim controller, the
scheduler, the gpu.example.com slice publisher, one kubelet with ``--gpus`` GPUs and, where the
checkout has it, the driver's kubelet plugin as its own process (``gpu_example.node``: the kubelet
calls it over gRPC; a checkout without it runs the plugin inside the kubelet). Each of ``--rounds``
rounds creates ``--pods`` pods with one template claim each, waits until every one started, then
deletes them all and waits until their claims are gone. Latency per pod: the log's storage time of
``PodStarted`` minus that of ``PodBound`` (prepare, checkpoint, start in the kubelet), p50/p99.

``python -m bench.pod_start [--gpus 8] [--pods 8] [--rounds 10] [--json]``; ``--json`` prints one
JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

from bench.harness import (
    Bus,
    LogFollower,
    Services,
    gpu_template,
    pct,
    report,
    stored_at,
    template_pod,
    until,
)
from bench.scheduling_cluster import apply_all
from draflow.events.codec import HDR_TYPE
from draflow.infra.eventstore import EventStore, RawRecord
from draflow.services.runtime.client import ApiClient

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "draflow.services.drivers.gpu_example.node"
NODE = "node-1"


class Log(LogFollower):
    """PodBound / PodStarted storage times per pod name, and which claims exist."""

    def __init__(self, store: EventStore) -> None:
        super().__init__(store, idle_poll_s=0.05)
        self.bound: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.claims: set[str] = set()
        self.failed_prepares: list[str] = []  # the kubelet's FailedPrepareDynamicResources messages

    def apply(self, rec: RawRecord) -> None:
        kind, name = rec.subject.split(".")[2], rec.subject.rsplit(".", 1)[-1]
        t = rec.header(HDR_TYPE) or ""
        if t == "PodBound":
            self.bound.setdefault(name, stored_at(rec))
        elif t == "PodStarted":
            self.started.setdefault(name, stored_at(rec))
        elif kind == "ResourceClaim" and t == "ResourceClaimApplied":
            self.claims.add(name)
        elif kind == "ResourceClaim" and t == "ResourceClaimDeleted":
            self.claims.discard(name)
        elif t == "KubeEventRecorded" and b"FailedPrepareDynamicResources" in rec.data:
            self.failed_prepares.append(rec.data.decode(errors="replace"))

    def all_started(self, names: list[str]) -> bool:
        return all(n in self.started for n in names)

    async def until(self, check: Any, timeout_s: float, what: str) -> None:
        await until(check, self.changed, timeout_s, what)


def pod(name: str) -> dict[str, Any]:
    return template_pod(name, "default", "one-gpu")


TEMPLATE = gpu_template("one-gpu", "default")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with Bus("draflow-bench-") as bus:
        return await _run(args, bus)


async def _run(args: argparse.Namespace, bus: Bus) -> dict[str, Any]:
    settings, store = bus.settings, bus.store
    services = Services(settings)
    plugin_process = importlib.util.find_spec(PLUGIN) is not None
    gpus = ["--node", NODE, "--gpus", str(args.gpus)]

    async def spawn(module: str, *argv: str) -> None:
        await services.spawn(f"{module.rsplit('.', 1)[-1]}-{len(services.procs)}", module, *argv)

    log = Log(store)
    api: ApiClient | None = None
    try:
        await spawn("draflow.services.apiserver")
        for module in ("claim_controller", "scheduler", "drivers.gpu_example"):
            await spawn(f"draflow.services.{module}")
        await spawn("draflow.services.kubelet", *gpus)
        if plugin_process:
            await spawn(PLUGIN, *gpus)
        api = await ApiClient.connect(settings, actor="bench", timeout_s=60.0)
        for _ in range(600):
            with contextlib.suppress(Exception):
                if await api.list("ResourceSlice") and await api.list("DeviceClass"):
                    break
            await asyncio.sleep(0.1)
        log.start()
        await apply_all(api, [TEMPLATE])
        latencies: list[float] = []
        for r in range(args.rounds):
            names = [f"r{r:03d}-p{i:02d}" for i in range(args.pods)]
            await apply_all(api, [pod(n) for n in names])
            await log.until(functools.partial(log.all_started, names), 120, f"round {r} started")
            latencies += [(log.started[n] - log.bound[n]) * 1000 for n in names]
            await api.delete([("Pod", "default", n) for n in names])
            await log.until(lambda: not log.claims, 120, f"round {r} claims gone")
        result = {
            "gpus": args.gpus,
            "pods_per_round": args.pods,
            "rounds": args.rounds,
            "plugin": "separate process (gRPC)" if plugin_process else "in the kubelet",
            "bound_to_running_p50_ms": round(pct(latencies, 0.5), 1),
            "bound_to_running_p99_ms": round(pct(latencies, 0.99), 1),
            "bound_to_running_max_ms": round(max(latencies), 1),
            "failed_prepares": len(log.failed_prepares),
        }
        for message in log.failed_prepares[:3]:
            print(f"FailedPrepareDynamicResources: {message[:300]}")
        print(
            f"{len(latencies)} pods, plugin {result['plugin']}: bound -> Running "
            f"p50 {result['bound_to_running_p50_ms']} ms, p99 {result['bound_to_running_p99_ms']} ms, "
            f"max {result['bound_to_running_max_ms']} ms; {result['failed_prepares']} failed prepares"
        )
        return result
    finally:
        await log.stop()
        if api is not None:
            await api.close()
        await services.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pod_start", description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--pods", type=int, default=8, help="pods per round (at most --gpus)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not 0 < args.pods <= args.gpus:
        p.error("--pods: between 1 and --gpus")
    return report(run(args), as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
