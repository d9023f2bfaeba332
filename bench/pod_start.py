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
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.scheduling_cluster import apply_all
from draflow.events.codec import HDR_TYPE
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore, RawRecord
from draflow.infra.natsd import LocalNatsServer
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.tail import Tail

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "draflow.services.drivers.gpu_example.node"
NODE = "node-1"


def _stored_at(rec: RawRecord) -> float:
    if rec.ts_ns:
        return rec.ts_ns / 1e9
    return rec.time.timestamp() if rec.time is not None else time.time()


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


class Log:
    """PodBound / PodStarted storage times per pod name, and which claims exist."""

    def __init__(self, store: EventStore) -> None:
        self.bound: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.claims: set[str] = set()
        self.failed_prepares: list[str] = []  # the kubelet's FailedPrepareDynamicResources messages
        self.changed = asyncio.Event()
        self._tail = Tail(store, f"{store.root}.ev.>", 1, idle_poll_s=0.05)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        await self._tail.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self) -> None:
        async for records in self._tail.batches():
            for rec in records:
                kind, name = rec.subject.split(".")[2], rec.subject.rsplit(".", 1)[-1]
                t = rec.header(HDR_TYPE) or ""
                if t == "PodBound":
                    self.bound.setdefault(name, _stored_at(rec))
                elif t == "PodStarted":
                    self.started.setdefault(name, _stored_at(rec))
                elif kind == "ResourceClaim" and t == "ResourceClaimApplied":
                    self.claims.add(name)
                elif kind == "ResourceClaim" and t == "ResourceClaimDeleted":
                    self.claims.discard(name)
                elif t == "KubeEventRecorded" and b"FailedPrepareDynamicResources" in rec.data:
                    self.failed_prepares.append(rec.data.decode(errors="replace"))
            self.changed.set()

    def all_started(self, names: list[str]) -> bool:
        return all(n in self.started for n in names)

    async def until(self, check: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            self.changed.clear()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 0.5)


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }


TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-gpu", "namespace": "default"},
    "spec": {
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
        }
    },
}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="draflow-bench-"))
    server = LocalNatsServer(tmp / "nats")
    server.start()
    settings = Settings(nats_url=server.url, data_dir=tmp / "data", stream="BENCH", root="bench")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = await EventStore.open(settings, "bench")
    env = {
        "OTEL_TRACES_EXPORTER": "none",
        **os.environ,
        "DRAFLOW_NATS_URL": settings.nats_url,
        "DRAFLOW_STREAM": settings.stream,
        "DRAFLOW_SUBJECT_ROOT": settings.root,
        "DRAFLOW_DATA_DIR": str(settings.data_dir),
        "DRAFLOW_LOG_LEVEL": "WARNING",
    }
    procs: list[asyncio.subprocess.Process] = []
    plugin_process = importlib.util.find_spec(PLUGIN) is not None
    gpus = ["--node", NODE, "--gpus", str(args.gpus)]

    async def spawn(module: str, *argv: str) -> None:
        with open(settings.data_dir / f"{module.rsplit('.', 1)[-1]}-{len(procs)}.log", "wb") as log:  # noqa: ASYNC230
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable, "-m", module, *argv, cwd=ROOT, env=env, stdout=log, stderr=log
                )
            )

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
            "bound_to_running_p50_ms": round(_pct(latencies, 0.5), 1),
            "bound_to_running_p99_ms": round(_pct(latencies, 0.99), 1),
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
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
        await store.close()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pod_start", description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--pods", type=int, default=8, help="pods per round (at most --gpus)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not 0 < args.pods <= args.gpus:
        p.error("--pods: between 1 and --gpus")
    result = asyncio.run(run(args))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
