"""Memory of processes that lived through churn: RSS after pods came and went, against a warmed start.

Real processes on a real JetStream, as the Procfile runs them: a local nats-server, the apiserver,
the claim controller, the scheduler, the quota reconciler, the garbage collector, the node
lifecycle and workloads controllers, the gpu.example.com slice publisher, and per node (``--nodes``)
a kubelet with ``--gpus`` GPUs and the driver's kubelet plugin as its own process. The bench
creates a ResourceClaimTemplate (one GPU) and a ResourceQuota (so admission and the quota
reconciler count every claim), then churns pods: ``--in-flight`` pods exist at a time, each with a
claim from the template; each is deleted once Running and replaced by a new one, so creation, claim
generation, scheduling, binding, prepare, start, deletion and deallocation overlap.

Stages (``--stages``, cumulative pods churned; default 200,5000,20000): after each, the bench
waits until no pod, no claim and no Kubernetes Event is left (Events live ``--event-ttl`` seconds,
the apiserver's ``DRAFLOW_EVENT_TTL_S``; an hour by default, which would keep an hour of Events
alive), then until the log is quiet, and reads every process's RSS (``VmRSS``, the median of three
readings a second apart).

The **baseline** is the first stage (200 pods by default): every process has then run every code
path of a pod's life, imported what it imports lazily, filled its caches of compiled CEL and
schemas, and Python's allocator holds the arenas it will reuse (it rarely gives them back), so a
"fresh start" after the warm-up is the fair comparison; RSS before any pod is reported too
(``rss_mb_fresh``). ``rss_ratio`` is RSS after the last stage over the baseline.

``--trace-memory apiserver,scheduler``: those processes run under ``bench.memtrace`` (tracemalloc,
a snapshot per stage) and the bench prints the allocation sites that grew most from the baseline
to the last stage. Their RSS then includes tracemalloc's own.

``python -m bench.churn_memory [--stages 200,5000,20000] [--nodes 2] [--gpus 8] [--in-flight 8]
[--json]``; ``--json`` prints one JSON object as the last line with ``rss_mb_fresh``,
``rss_mb_baseline``, ``rss_mb_after`` (process -> MB after the last stage), ``rss_ratio``,
``stages`` (per stage: pods, log events, seconds, RSS per process, ratio, and of the RSS the
anonymous part, ``rss_anon_mb``, and malloc's brk heap, ``rss_heap_mb``), ``pods_churned``,
``events_in_log``, ``cpu_ms_per_pod`` (per process, over the stages after the baseline) and the
machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import Bus, LogFollower, Services, gpu_template, machine, report, template_pod, until
from bench.memtrace import top_growth
from bench.scheduling_cluster import apply_all
from draflow.events.codec import HDR_TYPE
from draflow.infra.eventstore import EventStore, RawRecord
from draflow.services.runtime.client import ApiClient

NS = "default"
PLUGIN = "draflow.services.drivers.gpu_example.node"
CONTROLLERS = (
    "claim_controller",
    "scheduler",
    "quota_reconciler",
    "garbage_collector",
    "node_lifecycle",
    "workloads",
)


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of a process in MB (0 when it is gone); ``field="RssAnon"``: its anonymous
    part, the heap (Python's arenas, malloc's) without the shared libraries."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def heap_mb(pid: int) -> float:
    """Resident memory of the process's ``[heap]`` (malloc's main arena, grown with brk) in MB;
    the rest of ``RssAnon`` is mmapped: Python's 1 MB arenas, large blocks, threads' arenas."""
    try:
        smaps = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return 0.0
    in_heap, kb = False, 0
    for line in smaps.splitlines():
        if line[:1] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
            in_heap = line.rstrip().endswith("[heap]")
        elif in_heap and line.startswith("Rss:"):
            kb += int(line.split()[1])
    return kb / 1024


class Log(LogFollower):
    """Which pods, claims and Kubernetes Events exist (namespace ``default``), which pods started,
    and the log's last sequence."""

    def __init__(self, store: EventStore) -> None:
        super().__init__(store, idle_poll_s=0.05)
        self.pods: set[str] = set()
        self.started: set[str] = set()
        self.claims: set[str] = set()
        self.events: set[str] = set()
        self.last_seq = 0
        self.failed = 0  # PodFailed: a pod that will never be Running

    def apply(self, rec: RawRecord) -> None:
        self.last_seq = rec.seq
        parts = rec.subject.split(".", 4)
        if len(parts) < 5 or parts[3] != NS:
            return
        kind, name, t = parts[2], parts[4], rec.header(HDR_TYPE) or ""
        if kind == "Pod":
            if t == "PodApplied":
                self.pods.add(name)
            elif t == "PodStarted":
                self.started.add(name)
            elif t == "PodFailed":
                self.failed += 1
            elif t == "PodDeleted":
                self.pods.discard(name)
                self.started.discard(name)
        elif kind == "ResourceClaim":
            if t == "ResourceClaimApplied":
                self.claims.add(name)
            elif t == "ResourceClaimDeleted":
                self.claims.discard(name)
        elif t == "KubeEventRecorded":
            self.events.add(name)
        elif t == "KubeEventDeleted":
            self.events.discard(name)

    def empty(self) -> bool:
        return not (self.pods or self.claims or self.events)

    async def until(self, check: Any, timeout_s: float, what: str) -> None:
        await until(check, self.changed, timeout_s, what)


def pod(name: str) -> dict[str, Any]:
    return template_pod(name, NS, "one-gpu")


SETUP: list[dict[str, Any]] = [
    gpu_template("one-gpu", NS),
    {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "claims", "namespace": NS},
        "spec": {"hard": {"count/resourceclaims.resource.k8s.io": "100000"}},
    },
]


class Churn:
    """The run: processes, the log follower, the pods in flight."""

    def __init__(self, args: argparse.Namespace, bus: Bus) -> None:
        self.args, self.bus = args, bus
        self.services = Services(bus.settings, env={"DRAFLOW_EVENT_TTL_S": str(args.event_ttl)})
        self.log = Log(bus.store)
        self.api: ApiClient | None = None
        self.created = 0
        self.live: set[str] = set()
        self.trace_dirs: dict[str, Path] = {}

    async def spawn(self, name: str, module: str, *argv: str) -> None:
        if name in self.args.trace_memory:
            out = self.bus.tmp / "memtrace" / name
            self.trace_dirs[name] = out
            await self.services.spawn(name, "bench.memtrace", str(out), module, *argv)
        else:
            await self.services.spawn(name, module, *argv)

    async def start(self) -> None:
        await self.spawn("apiserver", "draflow.services.apiserver")
        for name in CONTROLLERS:
            await self.spawn(name, f"draflow.services.{name}")
        await self.spawn("gpu_driver", "draflow.services.drivers.gpu_example")
        for i in range(1, self.args.nodes + 1):
            node = ["--node", f"node-{i}", "--gpus", str(self.args.gpus)]
            await self.spawn(f"kubelet_node_{i}", "draflow.services.kubelet", *node)
            await self.spawn(f"gpu_plugin_node_{i}", PLUGIN, *node)
        self.api = api = await ApiClient.connect(self.bus.settings, actor="bench", timeout_s=60.0)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if len(await api.list("ResourceSlice")) >= self.args.nodes and await api.list("DeviceClass"):
                    break
            await asyncio.sleep(0.2)
        else:
            raise TimeoutError("no ResourceSlice for every node within 180 s")
        self.log.start()
        await apply_all(api, SETUP)

    async def churn_to(self, total: int) -> None:
        """Pods through their whole life until ``total`` were created, then none is left."""
        assert self.api is not None
        log = self.log
        while self.created < total or self.live:
            room = min(self.args.in_flight - len(self.live), total - self.created)
            if room > 0:
                names = [f"p{self.created + i:06d}" for i in range(room)]
                self.created += room
                self.live.update(names)
                await apply_all(self.api, [pod(n) for n in names])
            await log.until(lambda: bool(self.live & log.started), 120, f"a pod Running ({self.created})")
            if log.failed:
                raise RuntimeError(f"{log.failed} pods failed; see the logs in {self.bus.settings.data_dir}")
            done = sorted(self.live & log.started)
            self.live.difference_update(done)
            await self.api.delete([("Pod", NS, n) for n in done])
        await log.until(log.empty, self.args.event_ttl * 2 + 120, "no pod, claim or Event left")
        await self._quiet()

    async def _quiet(self, for_s: float = 3.0) -> None:
        """Until nothing was appended for ``for_s`` seconds (every process folded the last event)."""
        seen, since = self.log.last_seq, time.monotonic()
        while time.monotonic() - since < for_s:
            await asyncio.sleep(0.25)
            if self.log.last_seq != seen:
                seen, since = self.log.last_seq, time.monotonic()

    def heap(self) -> dict[str, float]:
        return {name: round(heap_mb(self.services.pid(name)), 1) for name in self.services.procs}

    async def rss(self, field: str = "VmRSS") -> dict[str, float]:
        """Per process (and the nats-server) the median of three readings a second apart."""
        pids = {name: self.services.pid(name) for name in self.services.procs}
        if self.bus.nats_pid is not None:
            pids["nats-server"] = self.bus.nats_pid
        readings: dict[str, list[float]] = {name: [] for name in pids}
        for i in range(3):
            if i:
                await asyncio.sleep(1.0)
            for name, pid in pids.items():
                readings[name].append(rss_mb(pid, field))
        gone = [name for name, r in readings.items() if not all(r)]
        if gone:
            raise RuntimeError(f"processes exited: {gone}; see {self.bus.settings.data_dir}")
        return {name: round(statistics.median(r), 1) for name, r in readings.items()}

    def dump_traces(self) -> None:
        for name in self.trace_dirs:
            self.services.signal(name, signal.SIGUSR2)

    async def traces_written(self, count: int) -> None:
        deadline = time.monotonic() + 120
        while any(len(list(d.glob("*.snap"))) < count for d in self.trace_dirs.values()):
            if time.monotonic() > deadline:
                raise TimeoutError("tracemalloc snapshots not written within 120 s")
            await asyncio.sleep(0.5)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with Bus("draflow-bench-") as bus:
        churn = Churn(args, bus)
        try:
            return await _run(args, churn)
        finally:
            await churn.log.stop()
            if churn.api is not None:
                await churn.api.close()
            await churn.services.stop()


async def _run(args: argparse.Namespace, churn: Churn) -> dict[str, Any]:
    at_start = machine()
    await churn.start()
    await churn._quiet()
    fresh = await churn.rss()
    print(f"fresh (set-up only, log at {churn.log.last_seq}): {_fmt(fresh)}", flush=True)
    stages: list[dict[str, Any]] = []
    baseline: dict[str, float] = {}
    cpu_base: dict[str, float] = {}
    for i, total in enumerate(args.stages):
        began = time.monotonic()
        await churn.churn_to(total)
        took = time.monotonic() - began
        rss, anon = await churn.rss(), await churn.rss("RssAnon")
        if i == 0:
            baseline, cpu_base = rss, churn.services.cpu()
        if churn.trace_dirs:
            churn.dump_traces()
            await churn.traces_written(i + 1)
        ratio = {n: round(v / baseline[n], 3) for n, v in rss.items()}
        stage = {"pods": total, "events_in_log": churn.log.last_seq, "seconds": round(took, 1)}
        stage |= {"loadavg": machine()["loadavg"], "rss_mb": rss, "rss_ratio": ratio}
        stage |= {"rss_anon_mb": anon, "rss_heap_mb": churn.heap()}
        stages.append(stage)
        what = "baseline" if i == 0 else "after"
        print(
            f"{total} pods churned ({churn.log.last_seq} events, {took:.0f} s, "
            f"{(total - (args.stages[i - 1] if i else 0)) / took:.1f} pods/s), {what}: {_fmt(rss)}",
            flush=True,
        )
        if i:
            print(f"  ratio to the baseline: {', '.join(f'{n} {r:.2f}' for n, r in ratio.items())}")
    cpu = churn.services.cpu()
    pods_after_baseline = max(1, args.stages[-1] - args.stages[0])
    result: dict[str, Any] = {
        **at_start,
        "loadavg_end": machine()["loadavg"],
        "nodes": args.nodes,
        "gpus": args.gpus,
        "in_flight": args.in_flight,
        "event_ttl_s": args.event_ttl,
        "baseline_pods": args.stages[0],
        "pods_churned": args.stages[-1],
        "events_in_log": churn.log.last_seq,
        "rss_mb_fresh": fresh,
        "rss_mb_baseline": baseline,
        "rss_mb_after": stages[-1]["rss_mb"],
        "rss_ratio": stages[-1]["rss_ratio"],
        "max_rss_ratio": max(v for n, v in stages[-1]["rss_ratio"].items() if n != "nats-server"),
        "cpu_ms_per_pod": {
            n: round((s - cpu_base.get(n, 0.0)) * 1000 / pods_after_baseline, 2) for n, s in cpu.items()
        },
        "stages": stages,
        "traced": sorted(churn.trace_dirs),
    }
    worst = max((v, n) for n, v in result["rss_ratio"].items() if n != "nats-server")
    print(f"largest growth (Python processes): {worst[1]} {worst[0]:.3f}x the baseline")
    for name, out in churn.trace_dirs.items():
        print(f"{name}: allocation sites that grew most from the baseline (tracemalloc):")
        for line in top_growth(out / "0.snap", out / f"{len(stages) - 1}.snap"):
            print(f"  {line}")
    return result


def _fmt(rss: dict[str, float]) -> str:
    return ", ".join(f"{n} {v:.1f}" for n, v in rss.items()) + " MB"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.churn_memory", description=__doc__.splitlines()[0])
    p.add_argument(
        "--stages", default="200,5000,20000", help="cumulative pods churned; the first is the baseline"
    )
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--in-flight", type=int, default=8, help="pods in existence at a time")
    p.add_argument("--event-ttl", type=float, default=20.0, help="seconds a Kubernetes Event lives")
    p.add_argument("--trace-memory", default="", help="processes to run under tracemalloc (comma-separated)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:
        args.stages = [int(s) for s in args.stages.split(",") if s.strip()]
    except ValueError:
        p.error("--stages: comma-separated numbers of pods")
    if len(args.stages) < 2 or args.stages != sorted(set(args.stages)) or args.stages[0] < 1:
        p.error("--stages: at least two increasing numbers of pods (the first is the baseline)")
    if not 0 < args.in_flight <= args.nodes * args.gpus:
        p.error("--in-flight: between 1 and the GPUs of all nodes")
    if args.event_ttl <= 0:
        p.error("--event-ttl: more than 0 (Events must expire for no object to be left)")
    args.trace_memory = {s.strip() for s in args.trace_memory.split(",") if s.strip()}
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return report(run(args), as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
