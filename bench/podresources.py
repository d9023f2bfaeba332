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
* **sustained**: ``--clients`` client processes calling for ``--seconds`` while ``--churn`` times the
  oldest pod is deleted and a new one created (the node stays full: 110 is its pod capacity); calls/s,
  and each new pod's time from creation to Running, compared with the same churn without ``List``
  load (the kubelet keeping up with its events).

``python -m bench.podresources [--pods 110] [--claims 4] [--json]``; ``--json`` prints one JSON
object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

from grpc import aio

from bench.harness import Bus, Services, cpu_s, pct
from draflow.events.api.core_v1 import Pod
from draflow.services.kubelet.podresources.server import default_socket_path
from draflow.services.kubelet.podresources.v1 import api_pb2 as pb
from draflow.services.runtime.controller import Runtime

NODE = "node-1"
NS = "bench"


# A client process: a sync gRPC channel (the C core does the work) calling List for SECONDS; prints the
# count and how long it called.
CLIENT = """
import sys, time, grpc
socket, seconds = sys.argv[1], float(sys.argv[2])
with grpc.insecure_channel("unix:" + socket) as channel:
    rpc = channel.unary_unary("/v1.PodResourcesLister/List")  # bytes in, bytes out
    rpc(b"", timeout=10)  # connected
    n, begin = 0, time.monotonic()
    while time.monotonic() < begin + seconds:
        rpc(b"", timeout=10)
        n += 1
print(n, time.monotonic() - begin)
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
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": NS},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
            }
        },
    },
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
                response_deserializer=lambda b: b,  # bytes: the client's decoding is not the kubelet's cost
            )
            request = pb.ListPodResourcesRequest()
            blob: bytes = await list_rpc(request)
            answer = pb.ListPodResourcesResponse.FromString(blob)
            devices = sum(
                len(d.claim_resources)
                for p in answer.pod_resources
                for c in p.containers
                for d in c.dynamic_resources
            )
            assert len(answer.pod_resources) == args.pods and devices == args.pods * args.claims, devices
            print(f"List answer: {len(answer.pod_resources)} pods, {devices} devices, {len(blob):,} bytes")

            for _ in range(200):  # warm-up
                await list_rpc(request)
            lat = []
            for _ in range(args.calls):
                t = time.perf_counter()
                await list_rpc(request)
                lat.append((time.perf_counter() - t) * 1000)
            p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
            print(f"List latency, one client, {args.calls} calls: p50 {p50:.3f} ms, p99 {p99:.3f} ms")

            live = list(names)

            async def churn(tag: str) -> tuple[list[float], list[float]]:
                """The oldest pod deleted and a new one (same claims) created, one after another, so
                the node stays at ``--pods`` (its capacity at 110); (creation -> Running s, cold List ms)."""
                took, cold = [], []
                for i in range(args.churn):
                    old = live.pop(0)
                    (result,) = await rt.api.delete([("Pod", NS, old)])
                    assert result.error is None, result.error
                    await _until(lambda n=old: rt.get("Pod", NS, n) is None, 120, f"{old} deleted")
                    name = f"churn-{tag}-{i:02d}"
                    t = time.monotonic()
                    (result,) = await rt.api.apply([_pod(name, args.claims)])
                    assert result.error is None, result.error
                    await _until(lambda n=name: n in watch.running, 120, f"{name} Running")
                    took.append(watch.running[name] - t)
                    live.append(name)
                    c = time.perf_counter()
                    await list_rpc(request)  # the kubelet's state just changed: built again
                    cold.append((time.perf_counter() - c) * 1000)
                return took, cold

            idle_took, cold = await churn("idle")
            print(
                f"churn without List load: {args.churn} pods, creation -> Running p50 "
                f"{statistics.median(idle_took) * 1000:.0f} ms; cold List (answer rebuilt) p50 "
                f"{statistics.median(cold):.2f} ms"
            )

            kubelet_pid = cluster.pid("kubelet")
            cpu0 = cpu_s(kubelet_pid)
            start = time.monotonic()
            clients = [
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-c",
                    CLIENT,
                    str(socket),
                    str(args.seconds),
                    stdout=asyncio.subprocess.PIPE,
                )
                for _ in range(args.clients)
            ]
            busy_took, _ = await churn("busy")
            outputs = [await c.communicate() for c in clients]
            counts = [(int(out.split()[0]), float(out.split()[1])) for out, _ in outputs]
            calls = sum(n for n, _ in counts)
            elapsed = time.monotonic() - start
            rate = sum(n / t for n, t in counts)  # each client over its own calling time
            kubelet_cpu = (cpu_s(kubelet_pid) - cpu0) / elapsed
            print(
                f"sustained: {args.clients} client processes, {calls:,} List calls in {args.seconds:.0f}s "
                f"= {rate:,.0f} calls/s "
                f"(kubelet CPU {kubelet_cpu * 100:.0f}% of a core) while {args.churn} pods came and went: "
                f"creation -> Running p50 {statistics.median(busy_took) * 1000:.0f} ms"
            )
        return {
            "pods": args.pods,
            "claims_per_pod": args.claims,
            "list_bytes": len(blob),
            "list_p50_ms": round(p50, 3),
            "list_p99_ms": round(p99, 3),
            "list_cold_p50_ms": round(statistics.median(cold), 2),
            "sustained_calls_per_s": round(rate),
            "kubelet_cpu_cores": round(kubelet_cpu, 2),
            "churn_to_running_p50_ms_idle": round(statistics.median(idle_took) * 1000),
            "churn_to_running_p50_ms_busy": round(statistics.median(busy_took) * 1000),
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
    p.add_argument("--seconds", type=float, default=10.0, help="at least this long under load")
    p.add_argument("--churn", type=int, default=10, help="pods created and deleted during each phase")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    result = asyncio.run(run(args))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
