"""End-to-end DRA scheduling throughput, modelled on scheduler_perf's DRA cases.

Real processes on a real JetStream: a local nats-server, the apiserver, the claim controller
(generates each pod's ResourceClaim from its template; ``--claims bench`` has the bench create the
claims instead) and the scheduler. The bench creates a DeviceClass, a ResourceClaimTemplate,
``--nodes`` Nodes and one ResourceSlice per node with ``--devices-per-node`` devices (published
directly, as a driver would), then pods through the apiserver, each with one template claim for
one device. The bench itself stands in for the 500 kubelets (it registers the Nodes, as a light
node agent would) and, like scheduler_perf, does not run the bound pods: what is measured is
scheduling (allocation, reservation, binding through the PodScheduling saga). Timestamps come from
the log (JetStream's storage time of each event).

Phases (``B = --steady-pods``):

* steady state at *empty*, *half* and *full* occupancy: the scheduler is paused (SIGSTOP), B bound
  pods are deleted (the claim controller releases and deallocates their claims), B new pods are
  created and get their claims, then the scheduler continues (SIGCONT): pods/s = B / (last
  PodBound - SIGCONT). The queue is never empty while measured, as scheduler_perf measures.
* fill: the pods up to 50 % and then up to ``--pods`` are created while the scheduler runs
  (creation and scheduling overlap); pods/s = pods / (last PodBound - first PodApplied), and
  pod-created → claim-allocated latency (PodApplied → ClaimAllocated) p50/p99.

``python -m bench.scheduling [--nodes 500] [--devices-per-node 10] [--pods 5000] [--json]``;
``--json`` prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.scheduling_cluster import Tracker, apply_all, claim_manifest, cluster_manifests, pod_manifest
from draflow.events.api.core_v1 import PodResourceClaimStatus
from draflow.events.dra import ClaimDeallocated, ClaimReservationsReleased, PodClaimStatusesRecorded
from draflow.infra.config import Settings
from draflow.infra.eventstore import AppendRequest, EventStore
from draflow.infra.natsd import LocalNatsServer
from draflow.services.runtime.client import ApiClient

ROOT = Path(__file__).resolve().parents[1]


class Bench:
    def __init__(
        self, args: argparse.Namespace, settings: Settings, store: EventStore, tracker: Tracker
    ) -> None:
        self.args = args
        self.store = store
        self.tracker = tracker
        self.settings = settings
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.next_pod = 0
        self.live: list[str] = []  # bound or pending pods, oldest first

    async def spawn(self, name: str, module: str) -> None:
        env = {
            # the services trace by default; the benchmark measures them untraced unless asked
            "OTEL_TRACES_EXPORTER": "none",
            **os.environ,
            "DRAFLOW_NATS_URL": self.settings.nats_url,
            "DRAFLOW_STREAM": self.settings.stream,
            "DRAFLOW_SUBJECT_ROOT": self.settings.root,
            "DRAFLOW_DATA_DIR": str(self.settings.data_dir),
            "DRAFLOW_LOG_LEVEL": "WARNING",
        }
        with open(self.settings.data_dir / f"{name}.log", "wb") as log:  # noqa: ASYNC230
            self.procs[name] = await asyncio.create_subprocess_exec(
                sys.executable, "-m", module, cwd=ROOT, env=env, stdout=log, stderr=log
            )

    async def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.terminate()
        for proc in self.procs.values():
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()

    def signal_scheduler(self, sig: int) -> None:
        self.procs["scheduler"].send_signal(sig)

    async def create(self, api: ApiClient, n: int) -> list[str]:
        names = [f"pod-{self.next_pod + i:05d}" for i in range(n)]
        self.next_pod += n
        await apply_all(api, [pod_manifest(p) for p in names])
        self.live.extend(names)
        if self.args.claims == "bench":
            await self.create_claims(api, names)
        return names

    async def create_claims(self, api: ApiClient, names: list[str]) -> None:
        """What the claim controller does for each new pod: its claim from the template (owned by
        the pod) and ``status.resourceClaimStatuses``."""
        tracker = self.tracker
        await tracker.until(lambda: all(p in tracker.uid_of for p in names), 120, "pods in the log")
        await apply_all(api, [claim_manifest(p, tracker.uid_of[p]) for p in names])
        reqs = [
            AppendRequest(
                self.store.subject("Pod", "default", p),
                [
                    PodClaimStatusesRecorded(
                        statuses=(PodResourceClaimStatus(name="gpu", resource_claim_name=f"{p}-gpu"),)
                    )
                ],
                None,
            )
            for p in names
        ]
        await self.store.append_many(reqs)

    async def delete_oldest(self, api: ApiClient, n: int) -> list[str]:
        gone, self.live = self.live[:n], self.live[n:]
        await api.delete([("Pod", "default", p) for p in gone], grace_period_seconds=0)
        if self.args.claims == "bench":  # release, deallocate, delete, as the claim controller does
            reqs = [
                AppendRequest(
                    self.store.subject("ResourceClaim", "default", f"{p}-gpu"),
                    [
                        ClaimReservationsReleased(uids=(self.tracker.uid_of[p],)),
                        ClaimDeallocated(reason="PodDeleted"),
                    ],
                    None,
                )
                for p in gone
            ]
            await self.store.append_many(reqs)
            await api.delete([("ResourceClaim", "default", f"{p}-gpu") for p in gone])
        return gone


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def run(
    args: argparse.Namespace, on_ready: Callable[[Settings], Awaitable[Any]] | None = None
) -> dict[str, Any]:
    """``on_ready(settings)`` runs once the apiserver answers, before the cluster is set up
    (``bench.kubeapi`` connects its watchers there)."""
    tmp = Path(tempfile.mkdtemp(prefix="draflow-bench-"))
    server = LocalNatsServer(tmp / "nats")
    server.start()
    settings = Settings(nats_url=server.url, data_dir=tmp / "data", stream="BENCH", root="bench")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = await EventStore.open(settings, "bench")
    tracker = Tracker(store)
    bench = Bench(args, settings, store, tracker)
    api: ApiClient | None = None
    try:
        await bench.spawn("apiserver", "draflow.services.apiserver")
        if args.claims == "controller":
            await bench.spawn("claim_controller", "draflow.services.claim_controller")
        await bench.spawn("scheduler", "draflow.services.scheduler")
        api = await ApiClient.connect(settings, actor="bench", timeout_s=60.0)
        for _ in range(300):
            try:
                await api.list("Node")
                break
            except Exception:
                await asyncio.sleep(0.1)
        if on_ready is not None:
            await on_ready(settings)
        tracker.start()
        t0 = time.monotonic()
        setup = await api.apply(cluster_manifests(args.nodes, args.devices_per_node))
        assert all(r.error is None for r in setup), [r.error for r in setup if r.error][:1]
        took = time.monotonic() - t0
        print(f"setup: {args.nodes} nodes x {args.devices_per_node} devices in {took:.1f}s", end="; ")
        print(f"claims created by the {args.claims}")
        steady: dict[str, float] = {}
        fill_pods = 0
        fill_time = 0.0
        latencies: list[float] = []

        async def measure_steady(level: str) -> None:
            b = args.steady_pods
            bench.signal_scheduler(signal.SIGSTOP)
            try:
                before = tracker.deallocated
                gone = await bench.delete_oldest(api, b) if level != "empty" else []
                if gone:
                    await tracker.until(
                        lambda: tracker.deallocated - before >= len(gone), 120, "deallocations"
                    )
                names = await bench.create(api, b)
                await tracker.until(lambda: all(n in tracker.statuses for n in names), 120, "claims")
            finally:
                bench.signal_scheduler(signal.SIGCONT)
            start = time.time()
            await tracker.until(lambda: all(n in tracker.bound for n in names), 300, f"steady {level}")
            end = max(tracker.bound[n] for n in names)
            steady[level] = b / max(end - start, 1e-6)
            print(f"steady state ({level}): {b} pods in {end - start:.2f}s = {steady[level]:.1f} pods/s")

        async def fill(upto: int) -> None:
            nonlocal fill_pods, fill_time
            n = upto - len(bench.live)
            if n <= 0:
                return
            names: list[str] = []
            began = time.monotonic()
            for i in range(0, n, args.create_chunk):
                names += await bench.create(api, min(args.create_chunk, n - i))
                if args.fill_rate > 0:  # paced creation: latency without queueing
                    await asyncio.sleep(max(0.0, began + len(names) / args.fill_rate - time.monotonic()))
            await tracker.until(lambda: all(p in tracker.bound for p in names), 600, "fill")
            uids = [tracker.uid_of[p] for p in names]
            first = min(tracker.created[u] for u in uids)
            last = max(tracker.bound[p] for p in names)
            fill_pods += n
            fill_time += last - first
            latencies.extend((tracker.allocated[u] - tracker.created[u]) * 1000 for u in uids)
            print(f"fill to {upto}: {n} pods in {last - first:.2f}s = {n / (last - first):.1f} pods/s")

        total = args.pods
        await measure_steady("empty")
        await fill(total // 2)
        await measure_steady("half")
        await fill(total)
        await measure_steady("full")
        result = {
            "nodes": args.nodes,
            "devices_per_node": args.devices_per_node,
            "pods": total,
            "claims_created_by": "claim-controller" if args.claims == "controller" else "bench",
            "steady_empty_pods_per_s": round(steady["empty"], 1),
            "steady_half_pods_per_s": round(steady["half"], 1),
            "steady_full_pods_per_s": round(steady["full"], 1),
            "steady_pods_per_s": round(statistics.fmean(steady.values()), 1),
            "fill_pods_per_s": round(fill_pods / fill_time, 1) if fill_time else 0.0,
            "alloc_latency_p50_ms": round(_pct(latencies, 0.50), 1),
            "alloc_latency_p99_ms": round(_pct(latencies, 0.99), 1),
        }
        print(
            f"fill: {fill_pods} pods at {result['fill_pods_per_s']} pods/s; pod created -> claim allocated "
            f"p50 {result['alloc_latency_p50_ms']} ms, p99 {result['alloc_latency_p99_ms']} ms"
        )
        print(f"steady state: {result['steady_pods_per_s']} pods/s (mean of empty/half/full)")
        saga_ms = [t * 1000 for t in tracker.saga_took]
        result["saga_p50_ms"] = round(_pct(saga_ms, 0.5), 1)
        result["saga_p99_ms"] = round(_pct(saga_ms, 0.99), 1)
        print(f"PodScheduling saga duration: p50 {result['saga_p50_ms']} ms, p99 {result['saga_p99_ms']} ms")
        pids = {name: proc.pid for name, proc in bench.procs.items()}
        if server.proc is not None:
            pids["nats-server"] = server.proc.pid
        pids["bench"] = os.getpid()
        cpu = {name: round(_cpu_s(pid) * 1000 / bench.next_pod, 2) for name, pid in pids.items()}
        result["cpu_ms_per_pod"] = cpu
        result["pods_created"] = bench.next_pod
        print("CPU ms per pod: " + ", ".join(f"{k} {v}" for k, v in cpu.items()))
        result.update(await _events_per_pod(store, len(tracker.bound)))
        print(
            f"log: {result['events_per_bound_pod']} events per bound pod "
            f"({result['guard_events_per_bound_pod']} of them guard messages); "
            f"{result['guard_retries']} PreBind retries after a guard conflict, "
            f"{result['sagas_compensated']} sagas compensated"
        )
        return result
    finally:
        await tracker.stop()
        if api is not None:
            await api.close()
        await bench.stop_all()
        await store.close()
        server.stop()


async def _events_per_pod(store: EventStore, bound: int) -> dict[str, float]:
    """What the run wrote to the log per bound pod (set-up included), how much of it guards, and
    what conflicts cost: PreBind appends retried after a guard conflict (attempt > 0 in the take's
    message id), sagas compensated."""
    total = guards = retried = compensated = 0
    async for records in store.read_raw(None, 1):
        total += len(records)
        for r in records:
            if ".ev.Guard." in r.subject:
                guards += 1
                msg_id = (r.header("Nats-Msg-Id") or "").split("#g")[0]
                retried += msg_id.startswith("saga:") and not msg_id.endswith(":0")
            elif r.header("Draflow-Type") == "SagaCompensated":
                compensated += 1
    per = max(bound, 1)
    return {
        "events_per_bound_pod": round(total / per, 2),
        "guard_events_per_bound_pod": round(guards / per, 2),
        "guard_retries": retried,
        "sagas_compensated": compensated,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scheduling", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--devices-per-node", type=int, default=10)
    p.add_argument("--pods", type=int, default=5000, help="fill to this many pods (<= nodes x devices)")
    p.add_argument("--steady-pods", type=int, default=500, help="pods per steady-state measurement")
    p.add_argument("--create-chunk", type=int, default=250, help="pods per apply request while filling")
    p.add_argument(
        "--fill-rate", type=float, default=0.0, help="create fill pods at this rate (0: as fast as possible)"
    )
    p.add_argument(
        "--claims",
        choices=("controller", "bench"),
        default="controller",
        help="who creates (and, after pod deletion, releases and deletes) the claims",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.pods > args.nodes * args.devices_per_node:
        p.error("--pods: more pods than devices")
    if args.steady_pods * 2 > args.pods:
        p.error("--steady-pods: at most half of --pods")
    result = asyncio.run(run(args))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
