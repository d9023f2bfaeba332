"""``python -m draflow.services.kubelet --node NAME [--gpus N]``: one node's kubelet until SIGTERM.

DRA drivers' node plugins are their own processes (``python -m
draflow.services.drivers.gpu_example.node --node NAME``, ``...nvidia_sim.node``, the classic
drivers' ``...classic_plugin --driver fpga.example.com|gpu.acme.com|frobnicator.example.com``, or any
plugin built from Kubernetes' protos): the kubelet watches
``$DRAFLOW_DATA_DIR/kubelet/<node>/plugins_registry`` for their registration sockets and calls their
DRA node service (v1 or v1beta1) over gRPC, each call with a deadline of ``--plugin-call-timeout``
seconds (``draflow.services.kubelet.plugins``). It follows the device health and the numeric
capacity (KEP-4381, draflow's capacity stream) of the plugins that stream them, and publishes the
capacity as the node's ``NodeResourceCapacity`` objects.
``--gpus N`` labels the Node ``gpu.example.com/gpus=<N>``, which tells the driver's control-plane
process (``python -m draflow.services.drivers.gpu_example``) how many GPUs to publish for it; the
node's gpu.example.com plugin must be started with the same ``--gpus``.
``--device-plugin example.com/gpu=2`` stands in for a device plugin: the Node advertises those
extended resources in its capacity and allocatable (KEP-5004's mixed clusters), and the kubelet
assigns the devices (``gpu-0``, ``gpu-1``) to the containers that request them, as CDI devices of
the plugin's spec ``$DRAFLOW_DATA_DIR/cdi/<node>/example.com-gpu.json``
(``draflow.services.kubelet.devices``). The kubelet serves the PodResources gRPC API
(``v1.PodResourcesLister``) on ``$DRAFLOW_DATA_DIR/kubelet/<node>/pod-resources/kubelet.sock``
(``--pod-resources-socket``), rate-limited to ``--pod-resources-qps`` (100) with bursts of
``--pod-resources-burst`` (10).
The kubelet heartbeats through its node Lease (``kube-node-lease/<node>``), renewed every quarter
of ``--node-lease-duration-seconds`` (40): the node lifecycle controller marks a node whose Lease
goes stale ``Unknown`` (``python -m draflow.services.node_lifecycle``).
"""

from __future__ import annotations

if __name__ == "__main__":
    # run as a service: a SIGTERM or Ctrl-C that arrives while the imports below load is recorded,
    # then stops the service cleanly (draflow.infra.signals)
    from draflow.infra.signals import install_early

    install_early()

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draflow.infra.config import add_nats_url_arg
from draflow.infra.metrics import add_metrics_arg
from draflow.infra.service import ServiceContext, run_service
from draflow.services.drivers import cdi
from draflow.services.drivers.gpu_example.publisher import GPUS_LABEL
from draflow.services.kubelet import devices as device_plugin
from draflow.services.kubelet.classic_host import ClassicKubelet
from draflow.services.kubelet.devicehealth import HealthCache
from draflow.services.kubelet.heartbeat import NodeHeartbeat
from draflow.services.kubelet.lease import DEFAULT_LEASE_DURATION_S
from draflow.services.kubelet.node import DEFAULT_CAPACITY
from draflow.services.kubelet.plugins.capacity import CapacityWatcher
from draflow.services.kubelet.plugins.client import DEFAULT_TIMEOUT_S
from draflow.services.kubelet.plugins.health import HealthWatcher
from draflow.services.kubelet.plugins.registry import PluginRegistry
from draflow.services.kubelet.plugins.watcher import RegistrationWatcher
from draflow.services.kubelet.podresources.provider import KubeletSource
from draflow.services.kubelet.podresources.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from draflow.services.kubelet.podresources.server import PodResourcesServer, default_socket_path
from draflow.services.kubelet.service import KubeletService
from draflow.services.runtime.controller import Runtime
from draflow.services.runtime.kubeletapi.sockets import registry_dir


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m draflow.services.kubelet", description=__doc__)
    p.add_argument("--node", required=True, help="the node this kubelet runs (Node name)")
    p.add_argument(
        "--gpus",
        type=int,
        default=8,
        help="gpu.example.com GPUs on this node: the Node's label (0: none; its plugin is its own process)",
    )
    p.add_argument(
        "--labels",
        type=parse_labels,
        default={},
        help="extra Node labels, k=v,k2=v2 (e.g. fpga.example.com/fabric=true for the classic FPGA driver)",
    )
    p.add_argument(
        "--device-plugin",
        type=parse_labels,
        default={},
        metavar="NAME=COUNT,...",
        help="extended resources a device plugin advertises on this node (added to the Node's "
        "capacity and allocatable), e.g. example.com/gpu=2",
    )
    p.add_argument(
        "--plugin-call-timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="deadline of each NodePrepareResources / NodeUnprepareResources call "
        f"(default {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--node-lease-duration-seconds",
        type=int,
        default=DEFAULT_LEASE_DURATION_S,
        metavar="N",
        help="duration of the node's Lease in kube-node-lease, renewed every N/4 seconds (default 40)",
    )
    p.add_argument(
        "--pod-resources-socket",
        type=Path,
        default=None,
        metavar="PATH",
        help="where to serve the PodResources gRPC API "
        "(default $DRAFLOW_DATA_DIR/kubelet/<node>/pod-resources/kubelet.sock)",
    )
    p.add_argument(
        "--pod-resources-qps",
        type=float,
        default=DEFAULT_QPS,
        metavar="N",
        help=f"PodResources API calls per second before RESOURCE_EXHAUSTED (default {DEFAULT_QPS:g})",
    )
    p.add_argument(
        "--pod-resources-burst",
        type=int,
        default=DEFAULT_BURST,
        metavar="N",
        help=f"PodResources API calls allowed at once above the rate (default {DEFAULT_BURST})",
    )
    add_metrics_arg(p)  # read by draflow.infra.service.run_service
    add_nats_url_arg(p)  # read by draflow.infra.service.run_service
    args = p.parse_args(argv)
    if args.node_lease_duration_seconds <= 0:
        p.error("--node-lease-duration-seconds: must be greater than 0")
    if args.plugin_call_timeout <= 0:
        p.error("--plugin-call-timeout: must be greater than 0")
    if args.pod_resources_qps <= 0 or args.pod_resources_burst <= 0:
        p.error("--pod-resources-qps and --pod-resources-burst: must be greater than 0")
    try:
        args.device_counts = device_counts(args.device_plugin)
    except ValueError as exc:
        p.error(str(exc))
    return args


def device_counts(device_plugin: dict[str, str]) -> dict[str, int]:
    """``--device-plugin`` counts as device numbers (a plugin advertises whole devices)."""
    out = {}
    for name, raw in device_plugin.items():
        if not raw.isdigit():
            raise ValueError(f"--device-plugin {name}={raw}: the count must be a whole number of devices")
        out[name] = int(raw)
    return out


def parse_labels(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (x.strip() for x in raw.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"label {item!r}: expected key=value")
        out[key] = value
    return out


def build(
    rt: Runtime,
    ctx: ServiceContext,
    node: str,
    gpus: int,
    extra_labels: dict[str, str] | None = None,
    device_plugin: dict[str, str] | None = None,
    plugins: PluginRegistry | None = None,
    health: HealthCache | None = None,
    numeric: CapacityWatcher | None = None,
) -> KubeletService:
    state_dir = ctx.settings.service_dir(f"kubelet-{node}")
    labels: dict[str, str] = dict(extra_labels or {})
    if gpus > 0:
        labels[GPUS_LABEL] = str(gpus)
    registry = plugins if plugins is not None else PluginRegistry()
    # Pods with classic (KEP-3063) claims: their drivers' plugins (fpga.example.com, gpu.acme.com,
    # and frobnicator.example.com: processes of their own, draflow.services.drivers.classic_plugin)
    # are registered like any other
    classic = ClassicKubelet(node, registry, state_dir=state_dir / "classic")
    devices = None
    if device_plugin:
        counts = device_counts(device_plugin)
        devices = device_plugin_devices(counts, ctx.settings.data_dir / "cdi" / node, state_dir)
    return KubeletService(
        rt,
        node,
        state_dir,
        registry,
        node_labels=labels,
        classic=classic,
        capacity={**DEFAULT_CAPACITY, **(device_plugin or {})},
        devices=devices,
        health=health,
        numeric=numeric,
    )


def device_plugin_devices(
    counts: dict[str, int], cdi_root: Path, state_dir: Path
) -> device_plugin.DeviceManager:
    """The device manager from its checkpoint, and each plugin's static CDI spec (one device per id)."""
    manager = device_plugin.DeviceManager(counts, device_plugin.read_checkpoint(state_dir))
    for resource, ids in manager.registered.items():
        vendor, _, cls = resource.rpartition("/")
        env = resource.upper().replace(".", "_").replace("/", "_").replace("-", "_")
        spec = cdi.build_spec(vendor, cls, [cdi.CdiDevice(name=i, env=(f"{env}={i}",)) for i in ids])
        cdi.write_spec(cdi_root, f"{vendor}-{cls}", spec)
    return manager


def main_for(
    node: str,
    gpus: int,
    labels: dict[str, str] | None = None,
    device_plugin: dict[str, str] | None = None,
    lease_duration_s: int = DEFAULT_LEASE_DURATION_S,
    pod_resources: PodResourcesOptions | None = None,
    plugin_call_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Callable[[ServiceContext], Coroutine[Any, Any, None]]:
    options = pod_resources or PodResourcesOptions()

    async def main(ctx: ServiceContext) -> None:
        rt = Runtime(ctx.store, actor=f"kubelet/{node}", node=node)
        await rt.start()
        heartbeat: asyncio.Task[None] | None = None
        watching: asyncio.Task[None] | None = None
        releasing: asyncio.Task[None] | None = None
        server: PodResourcesServer | None = None
        registry = PluginRegistry()
        health = HealthCache()
        # the device health streams (on_change: the kubelet's, once it exists: its pods show it)
        streams = HealthWatcher(registry, health, on_change=rt.kick)
        # KEP-4381: the numeric capacity streams (a new report wakes a pass, which publishes it)
        numeric = CapacityWatcher(registry, on_change=rt.kick)

        def plugins_changed() -> None:
            rt.kick()  # pods waiting for their driver are tried again at once
            streams.reconcile()  # a health stream for every driver's serving instance
            numeric.reconcile()  # and a capacity stream, where the plugin serves one

        watcher = RegistrationWatcher(
            registry_dir(ctx.settings.data_dir, node),
            registry,
            call_timeout_s=plugin_call_timeout_s,
            on_change=plugins_changed,
        )
        try:
            kubelet = build(rt, ctx, node, gpus, labels, device_plugin, registry, health, numeric)
            streams.on_change = kubelet.health_changed
            # plugins that registered while we were down register again (their sockets are still
            # there); the claims of vanished pods are unprepared once their drivers answer
            await watcher.scan()
            watching = asyncio.create_task(watcher.run(ctx.stop))
            # what the log no longer has is unprepared before anything else (after a restart, and
            # after a stream reset, when the log folded is the new one): no stale CDI specs
            await kubelet.release_vanished()
            # what a plugin could not release yet (it is still starting, or restarting: it
            # registers in its own time) is tried again until the sync passes take over
            syncing = asyncio.Event()
            releasing = asyncio.create_task(kubelet.release_vanished(until=syncing))
            # PodResources answers from the checkpointed state at once, before any new event
            socket = options.socket or default_socket_path(ctx.settings.data_dir, node)
            server = PodResourcesServer(
                KubeletSource(kubelet),
                socket,
                qps=options.qps,
                burst=options.burst,
                link_if_too_long=options.socket is None,  # a deep data dir: a short socket, linked
            )
            await server.start()
            print(f"kubelet {node}: pod-resources API on {server.address}", flush=True)
            await rt.wait_for_apiserver()
            syncing.set()
            await releasing
            await kubelet.register()
            # the node lease: its own task, renewed every lease_duration_s / 4 until we stop
            heartbeat = asyncio.create_task(NodeHeartbeat(rt, node, lease_duration_s).run(ctx.stop))
            print(f"kubelet {node}: registered, {gpus} GPUs", flush=True)
            await rt.run(ctx.stop, kubelet.sync, resync_s=2.0)
        finally:
            await streams.close()
            await numeric.close()
            for task in (heartbeat, watching, releasing):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if server is not None:
                await server.stop()
            await rt.stop()

    return main


@dataclass(frozen=True, slots=True)
class PodResourcesOptions:
    socket: Path | None = None  # None: under the data dir
    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST


if __name__ == "__main__":
    args = parse_args(sys.argv[1:])
    main = main_for(
        args.node,
        args.gpus,
        args.labels,
        args.device_plugin,
        args.node_lease_duration_seconds,
        PodResourcesOptions(args.pod_resources_socket, args.pod_resources_qps, args.pod_resources_burst),
        args.plugin_call_timeout,
    )
    # A stream reset (deleted and created again) is rebuilt in place: the kubelet's node-local
    # effects (prepared devices, CDI specs) must follow the new log, not wait for a restart.
    sys.exit(run_service(f"kubelet-{args.node}", main, on_stream_reset="rebuild"))
