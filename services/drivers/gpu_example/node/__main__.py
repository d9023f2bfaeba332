"""``python -m draflow.services.drivers.gpu_example.node --node NAME [--gpus N]``: gpu.example.com's
kubelet plugin for one node, its own process (as dra-example-driver's DaemonSet pod is).

It registers with the node's kubelet through ``$DRAFLOW_DATA_DIR/kubelet/<node>/plugins_registry``
and serves the DRA node service on ``.../plugins/gpu.example.com/dra.sock``
(``draflow.services.drivers.kubeletplugin``); prepared claims are CDI specs under
``$DRAFLOW_DATA_DIR/cdi/<node>/`` and its checkpoint is ``.../plugins/gpu.example.com/checkpoint.json``.
``--gpus`` must match the kubelet's (the Node label the slice publisher reads). ``--dra-version
v1beta1.DRAPlugin`` serves the older API; ``--instance NAME`` runs a second instance beside the first
(a rolling update); the admin endpoint ``.../plugins/gpu.example.com/admin.sock`` switches failures
on and off (``python -m draflow.services.drivers.kubeletplugin.admin``).
"""

from __future__ import annotations

if __name__ == "__main__":
    # run as a service: a SIGTERM or Ctrl-C that arrives while the imports below load is recorded,
    # then stops the service cleanly (draflow.infra.signals)
    from draflow.infra.signals import install_early

    install_early()

import argparse
import sys
from collections.abc import Callable, Sequence

from draflow.services.drivers.gpu_example.plugin import GpuExamplePlugin
from draflow.services.drivers.gpu_example.slices import DRIVER
from draflow.services.drivers.kubeletplugin.host import PluginContext, plugin_main


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", type=int, default=8, help="GPUs on this node (the kubelet's --gpus)")


def driver_for(args: argparse.Namespace) -> Callable[[PluginContext], GpuExamplePlugin]:
    gpus: int = args.gpus
    if gpus < 1:
        raise ValueError("--gpus: must be at least 1")

    def make(ctx: PluginContext) -> GpuExamplePlugin:
        return GpuExamplePlugin(
            ctx.node,
            ctx.cdi_root,
            ctx.get_claim,
            num_gpus=gpus,
            state_dir=ctx.plugins_dir / DRIVER,
            failures=ctx.failures,
        )

    return make


def main(argv: Sequence[str] | None = None) -> int:
    return plugin_main(
        "gpu-example-plugin",
        driver_for,
        prog="python -m draflow.services.drivers.gpu_example.node",
        description=__doc__,
        add_args=add_args,
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
