"""``python -m draflow.services.drivers.nvidia_sim.node --node NAME --gpus N [--mig-gpus K]``: the
simulated NVIDIA driver's kubelet plugin for one node, its own process.

As NVIDIA's kubelet plugin does, it publishes its own node's ``gpu.nvidia.com`` ResourceSlice
(owned by the Node, applied at every start: unchanged while the layout is), then serves the DRA
node service and registers with the node's kubelet (``draflow.services.drivers.kubeletplugin``).
Its checkpoint is ``$DRAFLOW_DATA_DIR/kubelet/<node>/plugins/gpu.nvidia.com/checkpoint.json``.
"""

from __future__ import annotations

if __name__ == "__main__":
    # run as a service: a SIGTERM or Ctrl-C that arrives while the imports below load is recorded,
    # then stops the service cleanly (draflow.infra.signals)
    from draflow.infra.signals import install_early

    install_early()

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence

from draflow.services.dra.kubeletplugin import DRAPlugin
from draflow.services.drivers.kubeletplugin.host import PluginContext, plugin_main
from draflow.services.drivers.nvidia_sim.devices import DRIVER, NodeLayout, node_slice
from draflow.services.drivers.nvidia_sim.plugin import NvidiaGpuPlugin


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", type=int, required=True, metavar="N", help="simulated GH200 GPUs on this node")
    p.add_argument("--mig-gpus", type=int, default=0, metavar="K", help="of those, the last K in MIG mode")


def driver_for(args: argparse.Namespace) -> Callable[[PluginContext], NvidiaGpuPlugin]:
    layout = NodeLayout(args.gpus, args.mig_gpus)  # a LayoutError (a ValueError) is a usage error

    def make(ctx: PluginContext) -> NvidiaGpuPlugin:
        return NvidiaGpuPlugin(
            ctx.node, layout, ctx.cdi_root, ctx.get_claim, state_dir=ctx.plugins_dir / DRIVER
        )

    return make


async def publish_slice(ctx: PluginContext, driver: DRAPlugin) -> None:
    """The node's slice, owned by its Node once the kubelet registered it. A refusal is fatal: a
    plugin whose devices nobody can see is useless."""
    assert isinstance(driver, NvidiaGpuPlugin)
    node = ctx.rt.get("Node", "", ctx.node)
    while node is None:  # the kubelet registers the Node; the slice names it as its owner
        await asyncio.sleep(0.2)
        node = ctx.rt.get("Node", "", ctx.node)
    if not await ctx.rt.apply(node_slice(ctx.node, driver.devices, node.metadata.uid)):
        raise RuntimeError(f"{DRIVER} plugin on {ctx.node}: cannot publish its ResourceSlice")


def main(argv: Sequence[str] | None = None) -> int:
    return plugin_main(
        "nvidia-plugin",
        driver_for,
        prog="python -m draflow.services.drivers.nvidia_sim.node",
        description=__doc__,
        add_args=add_args,
        after_start=publish_slice,
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
