"""A real cluster for the PodResources tests, and a real gRPC client of a kubelet's socket.

Processes: apiserver, claim controller, scheduler, the gpu.example.com slice publisher, the classic
driver controller, and one kubelet (``node-1``: 8 gpu.example.com GPUs, the FPGA fabric label for the
classic driver, and a device plugin advertising two ``example.com/gpu``) with the two drivers'
kubelet plugins (gpu.example.com, fpga.example.com). The data dir is short
(``/tmp/pr-XXXX``) so the default socket path fits a unix socket's 107 bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
from grpc import aio

from draflow.infra.config import Settings
from draflow.infra.natsd import LocalNatsServer
from draflow.services.kubelet.podresources.server import default_socket_path
from draflow.services.kubelet.podresources.v1 import api_pb2 as pb
from draflow.services.runtime.controller import Runtime
from tests.conftest import settings_for
from tests.helpers import wait_for
from tests.processes import CLASSIC_PLUGIN, GPU_PLUGIN, ROOT, Proc, stop_cleanly
from tests.shells import manifests, start_runtime

NODE = "node-1"
KUBELET_ARGS = [
    "--node",
    NODE,
    "--gpus",
    "8",
    "--labels",
    "fpga.example.com/fabric=true",
    "--device-plugin",
    "example.com/gpu=2",
    # these tests check what the API answers, not its rate limit (tests/.../test_server.py does):
    # a test's dozen back-to-back calls exceed the default burst of 10 on a fast machine
    "--pod-resources-qps",
    "10000",
    "--pod-resources-burst",
    "1000",
]
SERVICES: tuple[tuple[str, list[str], str | None], ...] = (
    ("draflow.services.claim_controller", [], "claim-controller: following"),
    ("draflow.services.scheduler", [], None),
    ("draflow.services.drivers.gpu_example", [], "gpu-example-driver: publishing"),
    ("draflow.services.driver_controller", [], "driver-controller: drivers"),
)
DEVICE_CLASS = ROOT / "examples" / "dra-example-driver" / "deviceclass.yaml"


def short_settings(server: LocalNatsServer) -> Settings:
    return settings_for(server, Path(tempfile.mkdtemp(prefix="pr-", dir="/tmp")))


def socket_of(settings: Settings, node: str = NODE) -> Path:
    return default_socket_path(settings.data_dir, node)


def start_kubelet(settings: Settings, *extra: str) -> Proc:
    return Proc(settings, "draflow.services.kubelet", [*KUBELET_ARGS, *extra])


async def kubelet_ready(proc: Proc) -> str:
    await asyncio.to_thread(proc.expect, f"kubelet {NODE}: pod-resources API on", 90)
    return await asyncio.to_thread(proc.expect, f"kubelet {NODE}: registered", 90)


@asynccontextmanager
async def cluster(settings: Settings, *kubelet_args: str) -> AsyncIterator[tuple[Runtime, list[Proc]]]:
    """Everything running, the DeviceClass applied; yields a probe runtime and the processes (the
    kubelet last, so a test may replace it)."""
    procs = [Proc(settings, "draflow.services.apiserver")]
    try:
        await asyncio.to_thread(procs[0].expect, "apiserver: serving", 60)
        probe, events = await start_runtime(settings, "podresources-probe")
        try:
            for result in await probe.api.apply(manifests(DEVICE_CLASS.read_text())):
                assert result.error is None, result.error
            procs += [Proc(settings, module, args) for module, args, _ in SERVICES]
            for proc, (_, _, ready) in zip(procs[1:], SERVICES, strict=True):
                if ready:
                    await asyncio.to_thread(proc.expect, ready, 90)
            # the node's gpu.example.com plugin, its own process (before the kubelet: the kubelet
            # stays last in procs, so a test may replace it)
            procs.append(Proc(settings, GPU_PLUGIN, ["--node", NODE, "--gpus", "8"]))
            await asyncio.to_thread(procs[-1].expect, f"gpu.example.com plugin on {NODE}: serving", 60)
            # and the classic fpga.example.com driver's plugin (the node has the fabric label)
            procs.append(Proc(settings, CLASSIC_PLUGIN, ["--driver", "fpga.example.com", "--node", NODE]))
            await asyncio.to_thread(procs[-1].expect, f"fpga.example.com plugin on {NODE}: serving", 60)
            procs.append(start_kubelet(settings, *kubelet_args))
            await kubelet_ready(procs[-1])
            await wait_for(lambda: len(probe.items("ResourceSlice")) == 1 or [], 60, "the node's slice")
            yield probe, procs
        finally:
            await probe.stop()
            # every process stops before its stream goes (one that sees its stream deleted stops
            # with exit 3 instead of 0); then the shared test server keeps no stream of ours
            await stop_cleanly([p for p in procs if p.proc.poll() is None])
            with contextlib.suppress(Exception):
                await events.js.delete_stream(settings.stream)
            await events.close()
    finally:
        await stop_cleanly([p for p in procs if p.proc.poll() is None])
        shutil.rmtree(settings.data_dir, ignore_errors=True)


async def call(socket: Path, method: str, request: Any, response_type: Any) -> Any:
    """One unary call on the kubelet's socket, as any gRPC client makes it."""
    async with aio.insecure_channel(f"unix:{socket}") as channel:
        rpc = channel.unary_unary(
            f"/v1.PodResourcesLister/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        return await rpc(request, timeout=10)


async def list_pods(socket: Path) -> pb.ListPodResourcesResponse:
    return await call(socket, "List", pb.ListPodResourcesRequest(), pb.ListPodResourcesResponse)


async def get_pod(socket: Path, namespace: str, name: str) -> pb.GetPodResourcesResponse:
    request = pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
    return await call(socket, "Get", request, pb.GetPodResourcesResponse)


async def allocatable(socket: Path) -> pb.AllocatableResourcesResponse:
    return await call(
        socket, "GetAllocatableResources", pb.AllocatableResourcesRequest(), pb.AllocatableResourcesResponse
    )


async def rpc_error(coro: Any) -> grpc.aio.AioRpcError:
    try:
        await coro
    except grpc.aio.AioRpcError as exc:
        return exc
    raise AssertionError("the call succeeded")


def running(probe: Runtime, ns: str, name: str) -> Callable[[], Any]:
    def check() -> bool | list[str]:
        pod = probe.get("Pod", ns, name)
        return (pod is not None and pod.status.phase == "Running") or [
            f"{ns}/{name}: {pod and pod.status.phase}"
        ]

    return check


def by_pod(response: pb.ListPodResourcesResponse) -> dict[tuple[str, str], pb.PodResources]:
    return {(p.namespace, p.name): p for p in response.pod_resources}


def containers(pod: pb.PodResources) -> dict[str, pb.ContainerResources]:
    return {c.name: c for c in pod.containers}


def devices_of(claim: pb.DynamicResource) -> list[tuple[str, str, str, list[str]]]:
    return [
        (r.driver_name, r.pool_name, r.device_name, [d.name for d in r.cdi_devices])
        for r in claim.claim_resources
    ]
