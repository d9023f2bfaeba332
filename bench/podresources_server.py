"""The PodResources server alone: its CPU per cached ``List``, grpcio's thread-pool server vs draflow's.

No cluster: a ``ListPodResourcesResponse`` shaped like the benchmark node's (``--pods`` pods x
``--claims`` one-GPU claims, built with the kubelet's own encoder) is served as cached bytes on a
unix socket by

* ``threadpool``: ``grpc.server`` with ``--workers`` threads and the methods registered with the C
  core (how the kubelet served it until 2026-11-29);
* ``core``: ``podresources.calls.CallServer``, one thread on grpcio's completion queue (the kubelet's
  server now),

while ``--clients`` client processes (real gRPC clients that deserialize every answer) call ``List``
for ``--seconds``. Printed per server: calls/s, the server process's CPU per call and the clients'
CPU per call (apart: the clients share the machine's cores), and the load average.
``python -m bench.podresources_server [--rounds 2] [--json]``; ``--json`` prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from draflow.services.kubelet.podresources import encode
from draflow.services.kubelet.podresources.calls import CallServer
from draflow.services.kubelet.podresources.view import ClaimDevice, ClaimView, ContainerView, PodView

ROOT = Path(__file__).resolve().parents[1]
LIST = "/v1.PodResourcesLister/List"

CLIENT = """
import json, sys, time, grpc
from draflow.services.kubelet.podresources.v1 import api_pb2 as pb
socket, seconds = sys.argv[1], float(sys.argv[2])
with grpc.insecure_channel("unix:" + socket) as channel:
    rpc = channel.unary_unary(
        "/v1.PodResourcesLister/List",
        request_serializer=pb.ListPodResourcesRequest.SerializeToString,
        response_deserializer=pb.ListPodResourcesResponse.FromString,
    )
    request = pb.ListPodResourcesRequest()
    rpc(request, timeout=10)
    n, cpu, begin = 0, time.process_time(), time.monotonic()
    while time.monotonic() < begin + seconds:
        rpc(request, timeout=10)
        n += 1
print(json.dumps({"calls": n, "seconds": time.monotonic() - begin, "cpu_s": time.process_time() - cpu}))
"""


def _uid(pod: int, claim: int) -> str:
    return f"0b1e2f3a-5c6d-4e7f-8a9b-{pod:06d}{claim:06d}"  # a claim's UID: 36 characters


def answer(pods: int, claims: int) -> bytes:
    """A List answer shaped like the benchmark node's (one container, ``claims`` one-GPU claims)."""
    views = [
        PodView(
            f"pod-{p:03d}",
            "bench",
            (
                ContainerView(
                    "ctr",
                    (),
                    tuple(
                        ClaimView(
                            f"pod-{p:03d}-gpu{c}-x7k2p",
                            "bench",
                            (
                                ClaimDevice(
                                    "gpu.example.com",
                                    "node-1",
                                    f"gpu-{p * claims + c}",
                                    (
                                        "k8s.gpu.example.com/gpu=common",
                                        f"k8s.gpu.example.com/gpu={_uid(p, c)}-gpu-{p * claims + c}",
                                    ),
                                ),
                            ),
                        )
                        for c in range(claims)
                    ),
                ),
            ),
        )
        for p in range(pods)
    ]
    return encode.list_response(views).SerializeToString()


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def serve(kind: str, address: str, blob: bytes, workers: int) -> Callable[[], None]:
    """Start a server of ``kind`` answering List with ``blob``; returns how to stop it."""
    if kind == "threadpool":
        pool = futures.ThreadPoolExecutor(max_workers=workers)
        server = grpc.server(pool)
        handler = grpc.unary_unary_rpc_method_handler(lambda request, context: blob)
        server.add_registered_method_handlers("v1.PodResourcesLister", {"List": handler})
        server.add_insecure_port(address)
        server.start()

        def stop() -> None:
            server.stop(None).wait()
            pool.shutdown()

        return stop
    core = CallServer({LIST: lambda call, request: call.reply(blob)})
    core.add_port(address)
    core.start()
    return lambda: core.stop(1.0)


def measure(kind: str, args: argparse.Namespace, blob: bytes) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="prs-", dir="/tmp") as d:
        socket = Path(d) / "s.sock"
        stop = serve(kind, f"unix:{socket}", blob, args.workers)
        try:
            load0 = os.getloadavg()[0]
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            cpu0 = _cpu()
            clients = [
                subprocess.Popen(
                    [sys.executable, "-c", CLIENT, str(socket), str(args.seconds)],
                    stdout=subprocess.PIPE,
                    env=env,
                )
                for _ in range(args.clients)
            ]
            reports = [json.loads(c.communicate()[0]) for c in clients]
            server_cpu = _cpu() - cpu0
        finally:
            stop()
    calls = sum(r["calls"] for r in reports)
    rate = sum(r["calls"] / r["seconds"] for r in reports)
    return {
        "server": kind,
        "calls_per_s": round(rate),
        "server_cpu_us_per_call": round(server_cpu / calls * 1e6),
        "server_cpu_cores": round(server_cpu / calls * rate, 2),  # while the clients call
        "client_cpu_us_per_call": round(sum(r["cpu_s"] for r in reports) / calls * 1e6),
        "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.podresources_server", description=__doc__.splitlines()[0]
    )
    p.add_argument("--pods", type=int, default=110)
    p.add_argument("--claims", type=int, default=4)
    p.add_argument("--clients", type=int, default=2, help="client processes")
    p.add_argument("--seconds", type=float, default=5.0, help="per server and round")
    p.add_argument("--workers", type=int, default=4, help="the thread-pool server's threads")
    p.add_argument("--rounds", type=int, default=2, help="the two servers alternately, this many times")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    blob = answer(args.pods, args.claims)
    print(f"answer: {args.pods} pods x {args.claims} claims, {len(blob):,} bytes; {args.clients} clients")
    results = []
    for _ in range(args.rounds):
        for kind in ("threadpool", "core"):
            r = measure(kind, args, blob)
            results.append(r)
            print(
                f"{kind:>10}: {r['calls_per_s']:,} calls/s, server {r['server_cpu_us_per_call']} us per "
                f"call ({r['server_cpu_cores'] * 100:.0f}% of a core), clients "
                f"{r['client_cpu_us_per_call']} us per call, "
                f"load average {r['load_average'][0]:.1f} -> {r['load_average'][1]:.1f}"
            )
    if args.json:
        print(json.dumps({"bytes": len(blob), "clients": args.clients, "runs": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
