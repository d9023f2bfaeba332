"""``python -m draflow.services.drivers.classic_plugin --driver fpga.example.com --node NAME``: a
classic (KEP-3063) driver's kubelet plugin as its own process, behind the same DRA v1 gRPC service
as the structured drivers.

The classic node API of the KEP (one ``NodePrepareResource`` per claim, carrying the claim's
resource handle) is not what any released kubelet speaks; here the kubelet makes the batched
``NodePrepareResources`` call with each claim's namespace, name and uid, and the plugin reads the
claim's classic allocation (its ``status.attributes``, the resource handle the driver-controller
wrote, and where it is available) from its own view of the log — as the structured plugins read
``status.allocation``. The Node's labels (for ``availableOnNodes``) come from the log too.

``--driver frobnicator.example.com`` (KEP-4381's numeric example driver) also streams its capacity
to the kubelet (``FrobnicatorDriver``: draflow's rendering of the KEP's capacity call), which
publishes it as the node's ``NodeResourceCapacity``.

``--driver fpga.example.com``: CDI ``fpga.example.com/fpga=<claim uid>``; ``--driver gpu.acme.com``:
``gpu.acme.com/gpu=<claim uid>`` (``fpga_example.node``, ``acme_gpu.node``). State:
``$DRAFLOW_DATA_DIR/kubelet/<node>/plugins/<driver>/checkpoint.json``; failure switches on the
admin endpoint as for every plugin of the library.
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

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import core_v1 as c1
from draflow.events.api.numeric_v1alpha2 import NodeResourceInstance
from draflow.services.dra.classic import claims as cl
from draflow.services.dra.kubeletplugin import PrepareResult
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers.acme_gpu.node import AcmeGpuNodePlugin
from draflow.services.drivers.classic_node import ClassicNodePlugin
from draflow.services.drivers.fpga_example.node import FpgaNodePlugin
from draflow.services.drivers.frobnicator import CAPACITY_LABEL as FROB_LABEL
from draflow.services.drivers.frobnicator import DRIVER_NAME as FROB_DRIVER
from draflow.services.drivers.frobnicator.node import FrobnicatorNodePlugin
from draflow.services.drivers.kubeletplugin.host import (
    PluginContext,
    add_plugin_args,
    options_from_args,
    run_plugin,
)

__all__ = ["DRIVERS", "KINDS", "ClassicDriver", "FrobnicatorDriver", "classic_claim", "driver_for", "ready"]

KINDS = frozenset({cv.CLAIM_KIND, "Node"})


def _fpga(ctx: PluginContext) -> ClassicNodePlugin:
    return FpgaNodePlugin(
        node_name=ctx.node,
        node_labels={},
        cdi_root=ctx.cdi_root,
        state_dir=ctx.plugins_dir / "fpga.example.com",
    )


def _acme(ctx: PluginContext) -> ClassicNodePlugin:
    return AcmeGpuNodePlugin(
        node_name=ctx.node,
        gpus=(),
        cdi_root=ctx.cdi_root,
        state_dir=ctx.plugins_dir / "gpu.acme.com",
    )


def _frob(ctx: PluginContext) -> ClassicNodePlugin:
    return FrobnicatorNodePlugin(
        node_name=ctx.node,
        node_labels={},
        frobnicators=0,  # until the plugin's view has the Node (FrobnicatorDriver.refresh)
        cdi_root=ctx.cdi_root,
        state_dir=ctx.plugins_dir / FROB_DRIVER,
    )


DRIVERS: dict[str, Callable[[PluginContext], ClassicNodePlugin]] = {
    "fpga.example.com": _fpga,
    "gpu.acme.com": _acme,
    FROB_DRIVER: _frob,
}
PROCESS_NAMES = {
    "fpga.example.com": "fpga-plugin",
    "gpu.acme.com": "acme-gpu-plugin",
    FROB_DRIVER: "frobnicator-plugin",
}


def classic_claim(ctx: PluginContext, ref: ClaimRef) -> cv.ResourceClaim | None:
    """The classic claim the kubelet named, in the plugin's view (None: not there, or another uid)."""
    claim = ctx.rt.get(cv.CLAIM_KIND, ref.namespace, ref.name)
    return claim if isinstance(claim, cv.ResourceClaim) and claim.metadata.uid == ref.uid else None


def ready(ctx: PluginContext, ref: ClaimRef) -> bool:
    claim = classic_claim(ctx, ref)
    return claim is not None and cl.phase(claim) == cv.ALLOCATED


class ClassicDriver:
    """A ``ClassicNodePlugin`` fed from the log: each claim asked for, and the Node's labels."""

    def __init__(self, ctx: PluginContext, plugin: ClassicNodePlugin) -> None:
        self.ctx = ctx
        self.plugin = plugin

    @property
    def driver_name(self) -> str:
        return self.plugin.driver_name

    def node_prepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        node = self.ctx.rt.get("Node", "", self.ctx.node)
        if isinstance(node, c1.Node):
            self.plugin.node_labels = dict(node.metadata.labels)
        for ref in claims:
            claim = classic_claim(self.ctx, ref)
            if claim is None:
                self.plugin.forget(ref.uid)  # answered NOT_FOUND (unless already prepared)
            else:
                self.plugin.observe(claim)
        return self.plugin.node_prepare_resources(claims)

    def node_unprepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, str | None]:
        return self.plugin.node_unprepare_resources(claims)


class FrobnicatorDriver(ClassicDriver):
    """frobnicator.example.com: its "hardware" is the Node's ``frobnicator.example.com/frobnicators``
    label (the demo's), less the failure switch ``capacity_lost`` (frobnicators that broke). It
    reports that as capacity (the stream the kubelet publishes) and double-checks every prepare
    against it."""

    def refresh(self) -> None:
        node = self.ctx.rt.get("Node", "", self.ctx.node)
        labels = node.metadata.labels if isinstance(node, c1.Node) else {}
        try:
            have = int(labels.get(FROB_LABEL, "0") or 0)
        except ValueError:
            have = 0
        plugin = self.plugin
        assert isinstance(plugin, FrobnicatorNodePlugin)
        plugin.set_frobnicators(max(0, have - self.ctx.failures.capacity_lost))

    def capacity(self) -> tuple[NodeResourceInstance, ...]:
        self.refresh()
        plugin = self.plugin
        assert isinstance(plugin, FrobnicatorNodePlugin)
        return plugin.capacity()

    def node_prepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        self.refresh()
        return super().node_prepare_resources(claims)


def driver_for(name: str) -> Callable[[PluginContext], ClassicDriver]:
    make = DRIVERS[name]
    wrapper = FrobnicatorDriver if name == FROB_DRIVER else ClassicDriver

    def build(ctx: PluginContext) -> ClassicDriver:
        return wrapper(ctx, make(ctx))

    return build


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m draflow.services.drivers.classic_plugin", description=__doc__)
    p.add_argument("--driver", required=True, choices=sorted(DRIVERS), help="the classic driver to serve")
    add_plugin_args(p)
    return p.parse_args(argv)


if __name__ == "__main__":
    args = parse_args(sys.argv[1:])
    sys.exit(
        run_plugin(
            PROCESS_NAMES[args.driver],
            driver_for(args.driver),
            options_from_args(args),
            kinds=KINDS,
            ready=ready,
        )
    )
