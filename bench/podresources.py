"""PodResources ``List`` on a full node: latency, sustained calls/s, and the kubelet keeping up.

Real processes on a real JetStream: a local nats-server, the apiserver, the claim controller, the
scheduler, the gpu.example.com slice publisher and one kubelet (``node-1``, ``--gpus`` GPUs, its
rate limit raised with ``--pod-resources-qps``/``--pod-resources-burst``: at the kubelet's default of
100 qps the limiter, not the server, would be measured). ``--pods`` pods (110, the kubelet's
default maxPods) each with ``--claims`` template claims of one GPU run on the node, then:

* **latency**: ``--calls`` sequential ``List`` calls from one gRPC client on the node's socket,
  p50/p99 (the answer is served from the kubelet's cache of the serialized response);
* **cold**: ``List`` right after the node's state changed (a new pod's claims prepared), when the
  kubelet builds the answer again: p50 over ``--churn`` pod starts;
* **sustained**: ``--clients`` client processes, each a real gRPC client on its own channel that
  deserializes every answer (as a monitoring agent does), calling for ``--seconds``: first on a
  steady node (the kubelet's CPU per call), then (at least as long, until the churn is done) while
  ``--churn`` times the oldest pod is deleted and a new one created (the node stays full: 110 is
  its pod capacity). Reported: calls/s, the kubelet's and the clients' CPU per call (apart: the
  clients share the machine's cores with the kubelet), the load average, and that the kubelet
  keeps up with its events meanwhile: each new pod's time from creation to Running, compared with
  the same churn without ``List`` load; the new pods in the clients' answers; and after each step a
  ``List`` that must show the new pod with its devices and not the deleted one.

``python -m bench.podresources [--pods 110] [--claims 4] [--json]``; ``--json`` prints one JSON
object as the last line. ``bench.podresources_server`` measures the gRPC server alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpc import aio

from bench.harness import Bus, Services, cpu_s, gpu_template, pct, report
from draflow.events.api.core_v1 import Pod
from draflow.services.kubelet.podresources.server import default_socket_path
from draflow.services.kubelet.podresources.v1 import api_pb2 as pb
from draflow.services.runtime.controller import Runtime

ROOT = Path(__file__).resolve().parents[1]
NODE = "node-1"
NS = "bench"


# A client process: a sync gRPC channel of its own calling List and deserializing each answer, as an
# agent does, until the file STOP exists; every 50th answer's pod names are noted (the churn must
# show in them). Prints a JSON line: calls, calling time, its own CPU seconds, the pod names seen.
CLIENT = """
import json, os, sys, time, grpc
from draflow.services.kubelet.podresources.v1 import api_pb2 as pb
socket, stop = sys.argv[1], sys.argv[2]
with grpc.insecure_channel("unix:" + socket) as channel:
    rpc = channel.unary_unary(
        "/v1.PodResourcesLister/List",
        request_serializer=pb.ListPodResourcesRequest.SerializeToString,
        response_deserializer=pb.ListPodResourcesResponse.FromString,
    )
    request = pb.ListPodResourcesRequest()
    rpc(request, timeout=10)  # connected
    print("ready", flush=True)
    seen = set()
    n, cpu, begin = 0, time.process_time(), time.monotonic()
    while True:
        answer = rpc(request, timeout=10)
        n += 1
        if n % 50 == 0:
            seen.update(p.name for p in answer.pod_resources)
            if os.path.exists(stop):
                break
    took, cpu = time.monotonic() - begin, time.process_time() - cpu
print(json.dumps({"calls": n, "seconds": took, "cpu_s": cpu, "seen": sorted(seen)}))
"""


def _pod(name: str, claims: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "resourceClaims": [
                {"name": f"gpu{i}", "resourceClaimTemplateName": "one-gpu"} for i in range(claims)
            ],
            "containers": [
                {
                    "name": "ctr",
                    "image": "busybox",
                    "resources": {"claims": [{"name": f"gpu{i}"} for i in range(claims)]},
                }
            ],
        },
    }


SETUP = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]},
    },
    gpu_template("one-gpu", NS),
]


async def _until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)


class Watch:
    """When each pod was first seen Running (the probe's cache follows the log)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.running: dict[str, float] = {}
        rt.cache.listen(self._on_change)

    def _on_change(self, kind: str, namespace: str, name: str, change: Any) -> None:
        if kind == "Pod" and namespace == NS and name not in self.running:
            pod = self.rt.get("Pod", NS, name)
            if isinstance(pod, Pod) and pod.status.phase == "Running":
                self.running[name] = time.monotonic()


@dataclass
class Load:
    """``--clients`` client processes calling ``List`` for ``--seconds``."""

    clients: int
    calls: int
    rate: float  # calls/s, summed over the clients (each over its own calling time)
    kubelet_cores: float  # the kubelet's CPU over the clients' window, in cores
    kubelet_us: float  # ... per call
    client_us: float  # the clients' own CPU per call
    load: tuple[float, float]  # the 1-minute load average before and after
    seen: set[str]  # pod names in the clients' sampled answers

    def line(self) -> str:
        return (
            f"{self.clients} client processes, {self.calls:,} calls = {self.rate:,.0f} calls/s; kubelet "
            f"{self.kubelet_cores * 100:.0f}% of a core = {self.kubelet_us:.0f} us per call (a core of "
            f"kubelet: {1e6 / self.kubelet_us:,.0f} calls/s); clients "
            f"{self.client_us:.0f} us per call; load average {self.load[0]:.1f} -> {self.load[1]:.1f}"
        )

    def json(self) -> dict[str, Any]:
        return {
            "calls_per_s": round(self.rate),
            "kubelet_cpu_cores": round(self.kubelet_cores, 2),
            "kubelet_cpu_us_per_call": round(self.kubelet_us),
            "kubelet_calls_per_core_s": round(1e6 / self.kubelet_us),  # what the kubelet alone could serve
            "client_cpu_us_per_call": round(self.client_us),
            "load_average": [round(x, 2) for x in self.load],
        }


async def load(
    args: argparse.Namespace, socket: Path, kubelet_pid: int, during: Awaitable[Any] | None = None
) -> Load:
    """The clients call for ``--seconds``, and until ``during`` (the churn) is done."""
    load0 = os.getloadavg()[0]
    stop = Path(tempfile.mkdtemp(prefix="prb-stop-")) / "stop"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    clients = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CLIENT,
            str(socket),
            str(stop),
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        for _ in range(args.clients)
    ]
    for c in clients:  # the window opens once every client is connected (they take a while to start)
        assert c.stdout is not None
        assert (await c.stdout.readline()).strip() == b"ready"
    cpu0, start = cpu_s(kubelet_pid), time.monotonic()
    await asyncio.sleep(args.seconds)
    if during is not None:
        await during
    stop.touch()
    outputs = [await c.communicate() for c in clients]
    shutil.rmtree(stop.parent, ignore_errors=True)
    kubelet_cpu, elapsed = cpu_s(kubelet_pid) - cpu0, time.monotonic() - start
    reports = [json.loads(out) for out, _ in outputs]
    calls = sum(r["calls"] for r in reports)
    return Load(
        clients=args.clients,
        calls=calls,
        rate=sum(r["calls"] / r["seconds"] for r in reports),
        kubelet_cores=kubelet_cpu / elapsed,
        kubelet_us=kubelet_cpu / calls * 1e6,
        client_us=sum(r["cpu_s"] for r in reports) / calls * 1e6,
        load=(load0, os.getloadavg()[0]),
        seen={n for r in reports for n in r["seen"]},
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    # short: the socket path has 107 bytes
    async with Bus("prb-", stream="PRBENCH", root="prbench", tmp_dir="/tmp", keep=False, data="d") as bus:
        return await _run(args, bus)


async def _run(args: argparse.Namespace, bus: Bus) -> dict[str, Any]:
    settings, store = bus.settings, bus.store
    rt = Runtime(store, actor="bench", api_timeout_s=60.0)
    cluster = Services(settings)
    socket = default_socket_path(settings.data_dir, NODE)
    try:
        await rt.start()
        watch = Watch(rt)
        await cluster.spawn("apiserver", "draflow.services.apiserver")
        await rt.wait_for_apiserver()
        for result in await rt.api.apply(SETUP):
            assert result.error is None, result.error
        await cluster.spawn("claim_controller", "draflow.services.claim_controller")
        await cluster.spawn("scheduler", "draflow.services.scheduler")
        await cluster.spawn("driver", "draflow.services.drivers.gpu_example")
        gpus = args.pods * args.claims
        await cluster.spawn(
            "kubelet",
            "draflow.services.kubelet",
            *("--node", NODE, "--gpus", str(gpus)),
            *("--pod-resources-qps", "1000000", "--pod-resources-burst", "1000000"),
        )
        # the driver's kubelet plugin: its own process, as on a node (docs/kubelet-plugins.md)
        await cluster.spawn(
            "gpu_plugin", "draflow.services.drivers.gpu_example.node", *("--node", NODE, "--gpus", str(gpus))
        )
        await _until(socket.exists, 120, "the kubelet's socket")
        t0 = time.monotonic()
        names = [f"pod-{i:03d}" for i in range(args.pods)]
        for result in await rt.api.apply([_pod(n, args.claims) for n in names]):
            assert result.error is None, result.error
        await _until(lambda: all(n in watch.running for n in names), 600, "pods Running")
        print(
            f"setup: {args.pods} pods x {args.claims} claims Running on {NODE} "
            f"in {time.monotonic() - t0:.1f}s"
        )

        async with aio.insecure_channel(f"unix:{socket}") as channel:
            list_rpc = channel.unary_unary(
                "/v1.PodResourcesLister/List",
                request_serializer=pb.ListPodResourcesRequest.SerializeToString,
                response_deserializer=pb.ListPodResourcesResponse.FromString,  # as a real client
            )
            request = pb.ListPodResourcesRequest()
            answer: pb.ListPodResourcesResponse = await list_rpc(request)
            size = answer.ByteSize()
            devices = sum(
                len(d.claim_resources)
                for p in answer.pod_resources
                for c in p.containers
                for d in c.dynamic_resources
            )
            assert len(answer.pod_resources) == args.pods and devices == args.pods * args.claims, devices
            print(f"List answer: {len(answer.pod_resources)} pods, {devices} devices, {size:,} bytes")

            for _ in range(200):  # warm-up
                await list_rpc(request)
            lat = []
            for _ in range(args.calls):
                t = time.perf_counter()
                await list_rpc(request)
                lat.append((time.perf_counter() - t) * 1000)
            p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
            print(
                f"List latency, one client, {args.calls} calls (answer deserialized): "
                f"p50 {p50:.3f} ms, p99 {p99:.3f} ms"
            )

            live = list(names)
            gone: list[str] = []  # deleted pods, in order

            async def churn(tag: str) -> tuple[list[float], list[float]]:
                """The oldest pod deleted and a new one (same claims) created, one after another, so
                the node stays at ``--pods`` (its capacity at 110); (creation -> Running s, cold List ms).
                Each List right after a new pod is Running must list it with its devices."""
                took, cold = [], []
                for i in range(args.churn):
                    old = live.pop(0)
                    (result,) = await rt.api.delete([("Pod", NS, old)])
                    assert result.error is None, result.error
                    await _until(lambda n=old: rt.get("Pod", NS, n) is None, 120, f"{old} deleted")
                    gone.append(old)
                    name = f"churn-{tag}-{i:02d}"
                    t = time.monotonic()
                    (result,) = await rt.api.apply([_pod(name, args.claims)])
                    assert result.error is None, result.error
                    await _until(lambda n=name: n in watch.running, 120, f"{name} Running")
                    took.append(watch.running[name] - t)
                    live.append(name)
                    c = time.perf_counter()
                    fresh = await list_rpc(request)  # the kubelet's state just changed: built again
                    cold.append((time.perf_counter() - c) * 1000)
                    listed = {p.name: p for p in fresh.pod_resources}
                    assert old not in listed, f"{old} still listed after its deletion"
                    new = listed.get(name)
                    assert new is not None, f"{name} Running but not listed"
                    assert (
                        sum(len(d.claim_resources) for d in new.containers[0].dynamic_resources)
                        == args.claims
                    )
                return took, cold

            idle_took, cold = await churn("idle")
            print(
                f"churn without List load: {args.churn} pods, creation -> Running p50 "
                f"{statistics.median(idle_took) * 1000:.0f} ms; cold List (answer rebuilt) p50 "
                f"{statistics.median(cold):.2f} ms"
            )

            steady = await load(args, socket, cluster.pid("kubelet"))
            print(f"sustained, steady node: {steady.line()}")

            before = set(gone)
            busy = asyncio.create_task(churn("busy"))
            loaded = await load(args, socket, cluster.pid("kubelet"), during=busy)
            busy_took, _ = busy.result()
            started = [n for n in live if n.startswith("churn-busy-")]
            seen = sum(1 for n in started if n in loaded.seen)
            print(
                f"sustained, while {args.churn} pods came and went: {loaded.line()}; creation -> Running "
                f"p50 {statistics.median(busy_took) * 1000:.0f} ms (without the load "
                f"{statistics.median(idle_took) * 1000:.0f} ms); the clients' answers listed {seen} of the "
                f"{len(started)} new pods (and a List after each step: the new pod with its devices, the "
                f"{len(set(gone) - before)} deleted ones gone)"
            )
        return {
            "pods": args.pods,
            "claims_per_pod": args.claims,
            "list_bytes": size,
            "list_p50_ms": round(p50, 3),
            "list_p99_ms": round(p99, 3),
            "list_cold_p50_ms": round(statistics.median(cold), 2),
            "clients": args.clients,
            "steady": steady.json(),
            "sustained_calls_per_s": round(loaded.rate),
            "kubelet_cpu_cores": round(loaded.kubelet_cores, 2),
            "kubelet_cpu_us_per_call": round(loaded.kubelet_us),
            "client_cpu_us_per_call": round(loaded.client_us),
            "load_average": [round(x, 2) for x in loaded.load],
            "churn_to_running_p50_ms_idle": round(statistics.median(idle_took) * 1000),
            "churn_to_running_p50_ms_busy": round(statistics.median(busy_took) * 1000),
            "new_pods_seen_by_clients": seen,
        }
    finally:
        await cluster.stop(15)
        await rt.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.podresources", description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, default=110, help="pods on the node (the kubelet's default maxPods)")
    p.add_argument("--claims", type=int, default=4, help="one-GPU claims per pod")
    p.add_argument("--calls", type=int, default=2000, help="sequential List calls for the latency")
    p.add_argument("--clients", type=int, default=2, help="client processes for the sustained rate")
    p.add_argument("--seconds", type=float, default=10.0, help="each load phase at least this long")
    p.add_argument("--churn", type=int, default=10, help="pods created and deleted during each phase")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    return report(run(args), as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
