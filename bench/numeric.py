"""Numeric-parameters (KEP-4381) scheduling throughput, in bench.scheduling's shape.

Real processes on a real JetStream: a local nats-server, the apiserver and the scheduler. The
bench creates a numeric ResourceClass (the counter model's template), ``--nodes`` Nodes, one
``NodeResourceCapacity`` per node with one counter instance of ``--units-per-node`` units (as the
kubelets would publish them), then ``--pods`` KEP-shaped pods, each with its own numeric claim
for one unit, in chunks of ``--create-chunk`` (claims first, then their pods: the bench stands
in for whoever creates claims, like bench.scheduling's ``--claims bench``). As in
bench.scheduling's fill phase, pods/s = pods / (last PodBound - first PodApplied), with the
pod-created -> claim-allocated latency (PodApplied -> NumericClaimAllocated) p50/p99, the
PodScheduling saga durations and CPU per pod. Nothing runs the bound pods. Timestamps are
JetStream's storage times.

The claims carry no ``parametersRef``: the template's ``has()`` default applies (one unit), so
no CustomResourceDefinition is needed. ``python -m bench.numeric [--nodes 500]
[--units-per-node 10] [--pods 2500] [--json]``; ``--json`` prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from bench.harness import Bus, LogFollower, Services, cpu_s, pct, report, serving_api, stored_at, until
from bench.scheduling_cluster import apply_all
from draflow.events.codec import HDR_TYPE, decode
from draflow.events.numeric import NumericClaimAllocated
from draflow.infra.eventstore import EventStore, RawRecord
from draflow.services.runtime.client import ApiClient

DRIVER = "frobnicator.example.com"
TEMPLATE = """kind: Parameters
apiVersion: counter.dra.config.k8s.io/v1alpha1
required: {{has(object.spec) ? object.spec.numberOfFrobnicators : 1}}
"""


def cluster_manifests(nodes: int, units: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "cdi.k8s.io/v1alpha1",
            "kind": "ResourceClass",
            "metadata": {"name": "frob"},
            "driverName": DRIVER,
            "numericParameters": [
                {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "ClaimParameters", "celTemplate": TEMPLATE}
            ],
        }
    ]
    for i in range(nodes):
        node = f"node-{i:04d}"
        alloc = {"cpu": "32", "memory": "128Gi", "pods": "110"}
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
                "status": {"allocatable": alloc, "capacity": alloc},
            }
        )
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1alpha2",
                "kind": "NodeResourceCapacity",
                "metadata": {"name": f"{node}-{DRIVER}"},
                "nodeName": node,
                "driverName": DRIVER,
                "instances": [
                    {
                        "id": "frobnicators",
                        "apiVersion": "counter.dra.config.k8s.io/v1alpha1",
                        "kind": "Capacity",
                        "data": {"count": units},
                    }
                ],
            }
        )
    return out


def claim_manifest(pod: str) -> dict[str, Any]:
    return {
        "apiVersion": "cdi.k8s.io/v1alpha1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{pod}-frob", "namespace": "default"},
        "spec": {"resourceClassName": "frob"},
    }


def pod_manifest(pod: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod, "namespace": "default"},
        "spec": {
            "resourceClaims": [{"name": "frob", "resourceClaimName": f"{pod}-frob"}],
            "containers": [{"name": "c", "image": "busybox", "resources": {"claims": ["frob"]}}],
        },
    }


class Tracker(LogFollower):
    """Storage times of what is measured, from the log."""

    def __init__(self, store: EventStore) -> None:
        super().__init__(store)
        self.created: dict[str, float] = {}  # pod uid -> PodApplied
        self.uid_of: dict[str, str] = {}
        self.bound: dict[str, float] = {}  # pod name -> PodBound
        self.allocated: dict[str, float] = {}  # pod uid -> NumericClaimAllocated
        self.saga_started: dict[str, float] = {}
        self.saga_took: list[float] = []

    def apply(self, rec: RawRecord) -> None:
        t = rec.header(HDR_TYPE) or ""
        ts = stored_at(rec)
        if t == "SagaStarted":
            self.saga_started[rec.subject] = ts
        elif t in ("SagaCompleted", "SagaCompensated") and rec.subject in self.saga_started:
            self.saga_took.append(ts - self.saga_started.pop(rec.subject))
        elif t == "PodBound":
            self.bound.setdefault(rec.subject.rsplit(".", 1)[-1], ts)
        elif t == "PodApplied":
            env = decode(rec.data, rec.seq)
            name = rec.subject.rsplit(".", 1)[-1]
            uid = env.data.object.metadata.uid  # type: ignore[attr-defined]
            if name not in self.uid_of:
                self.uid_of[name] = uid
                self.created[uid] = ts
        elif t == "NumericClaimAllocated":
            env = decode(rec.data, rec.seq)
            assert isinstance(env.data, NumericClaimAllocated)
            if env.data.consumer is not None:
                self.allocated.setdefault(env.data.consumer.uid, ts)

    async def until(self, check: Any, timeout_s: float, what: str) -> None:
        await until(check, self.changed, timeout_s, what)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with Bus("draflow-bench-numeric-") as bus:
        return await _run(args, bus)


async def _run(args: argparse.Namespace, bus: Bus) -> dict[str, Any]:
    settings, store = bus.settings, bus.store
    tracker = Tracker(store)
    services = Services(settings)
    api: ApiClient | None = None
    try:
        await services.spawn("apiserver", "draflow.services.apiserver")
        await services.spawn("scheduler", "draflow.services.scheduler")
        api = await serving_api(settings)
        tracker.start()
        t0 = time.monotonic()
        await apply_all(api, cluster_manifests(args.nodes, args.units_per_node))
        print(
            f"setup: {args.nodes} nodes x 1 counter instance of {args.units_per_node} units "
            f"in {time.monotonic() - t0:.1f}s"
        )
        names = [f"pod-{i:05d}" for i in range(args.pods)]
        for i in range(0, len(names), args.create_chunk):
            chunk = names[i : i + args.create_chunk]
            await apply_all(api, [claim_manifest(p) for p in chunk])
            await apply_all(api, [pod_manifest(p) for p in chunk])
        await tracker.until(lambda: all(p in tracker.bound for p in names), 900, "all pods bound")
        uids = [tracker.uid_of[p] for p in names]
        first = min(tracker.created[u] for u in uids)
        last = max(tracker.bound[p] for p in names)
        latencies = [
            (tracker.allocated[u] - tracker.created[u]) * 1000 for u in uids if u in tracker.allocated
        ]
        saga_ms = [t * 1000 for t in tracker.saga_took]
        cpu = services.cpu()
        if bus.nats_pid is not None:
            cpu["nats-server"] = cpu_s(bus.nats_pid)
        cpu["bench"] = cpu_s(os.getpid())
        result: dict[str, Any] = {
            "nodes": args.nodes,
            "units_per_node": args.units_per_node,
            "pods": args.pods,
            "fill_pods_per_s": round(args.pods / max(last - first, 1e-6), 1),
            "alloc_latency_p50_ms": round(pct(latencies, 0.50), 1),
            "alloc_latency_p99_ms": round(pct(latencies, 0.99), 1),
            "saga_p50_ms": round(pct(saga_ms, 0.5), 1),
            "saga_p99_ms": round(pct(saga_ms, 0.99), 1),
            "cpu_ms_per_pod": {n: round(s * 1000 / args.pods, 2) for n, s in cpu.items()},
        }
        print(f"fill: {args.pods} pods in {last - first:.2f}s = {result['fill_pods_per_s']} pods/s")
        print(
            f"pod created -> claim allocated p50 {result['alloc_latency_p50_ms']} ms, "
            f"p99 {result['alloc_latency_p99_ms']} ms; PodScheduling saga p50 {result['saga_p50_ms']} ms, "
            f"p99 {result['saga_p99_ms']} ms"
        )
        print("CPU ms per pod: " + ", ".join(f"{k} {v}" for k, v in result["cpu_ms_per_pod"].items()))
        return result
    finally:
        await tracker.stop()
        if api is not None:
            await api.close()
        await services.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.numeric", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--units-per-node", type=int, default=10)
    p.add_argument("--pods", type=int, default=2500, help="pods, one claim of one unit each")
    p.add_argument("--create-chunk", type=int, default=250, help="claims/pods per apply request")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.pods > args.nodes * args.units_per_node:
        p.error("--pods: more pods than units")
    return report(run(args), as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
