"""Running a driver's kubelet plugin as its own process, as a DaemonSet pod runs one per node.

``run_plugin`` is what a driver's ``__main__`` calls: it connects to the system with the node's
credential (``kubelet-<node>``: a plugin acts for its node, like the kubelet), follows the
ResourceClaims in the log (the driver reads each claim's allocation itself, as upstream drivers do
from the API), builds the driver with ``make_driver``, serves it (``PluginServer``: node service,
registration) and its admin endpoint until SIGTERM, then deregisters.

A claim the kubelet asks about may be one the plugin's view has not caught up with yet (the
kubelet saw the allocation first): a prepare waits up to ``claim_wait_s`` for every claim asked to
be there and allocated before the driver is called.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draflow.events.api.resource_v1 import ResourceClaim
from draflow.infra.config import Settings, add_nats_url_arg
from draflow.infra.metrics import add_metrics_arg
from draflow.infra.service import ServiceContext, run_service
from draflow.services.dra.kubeletplugin import DRAPlugin
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers.kubeletplugin.admin import AdminEndpoint, admin_path
from draflow.services.drivers.kubeletplugin.faults import FailureSwitches, Faulty
from draflow.services.drivers.kubeletplugin.server import PluginServer
from draflow.services.runtime.controller import Runtime
from draflow.services.runtime.kubeletapi import sockets, wire

__all__ = [
    "PluginContext",
    "PluginOptions",
    "add_plugin_args",
    "allocated",
    "options_from_args",
    "plugin_main",
    "run_plugin",
]


@dataclass(frozen=True, slots=True)
class PluginOptions:
    node: str
    versions: tuple[str, ...] = ("v1.DRAPlugin",)
    instance: str = ""  # set: one of several instances of this driver (a rolling update)
    admin: bool = True
    claim_wait_s: float = 5.0


@dataclass(slots=True)
class PluginContext:
    """What ``make_driver`` gets: the node, where plugins keep state, the driver's view of claims."""

    node: str
    settings: Settings
    rt: Runtime
    failures: FailureSwitches = field(default_factory=FailureSwitches)

    @property
    def plugins_dir(self) -> Path:
        """``$DRAFLOW_DATA_DIR/kubelet/<node>/plugins``: a driver keeps its state in ``<driver>/``."""
        return sockets.plugins_dir(self.settings.data_dir, self.node)

    @property
    def cdi_root(self) -> Path:
        return self.settings.data_dir / "cdi" / self.node

    def get_claim(self, ref: ClaimRef) -> ResourceClaim | None:
        claim = self.rt.get("ResourceClaim", ref.namespace, ref.name)
        return claim if claim is not None and claim.metadata.uid == ref.uid else None


MakeDriver = Callable[[PluginContext], DRAPlugin]
AfterStart = Callable[[PluginContext, DRAPlugin], Awaitable[None]]
# is the claim the kubelet named in the plugin's view, allocated? (a prepare waits until it is)
ClaimReady = Callable[[PluginContext, ClaimRef], bool]
STRUCTURED_KINDS = frozenset({"ResourceClaim"})


def add_plugin_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node", required=True, help="the node this plugin serves (its kubelet's --node)")
    p.add_argument(
        "--dra-version",
        action="append",
        choices=list(wire.BY_SERVICE),
        help="a DRA node service version to serve (repeat for several; default v1.DRAPlugin)",
    )
    p.add_argument(
        "--instance",
        default="",
        help="name this instance (a rolling update: old and new instances run side by side)",
    )
    p.add_argument("--no-admin", action="store_true", help="no admin endpoint (failure switches)")
    add_metrics_arg(p)
    add_nats_url_arg(p)


def options_from_args(args: argparse.Namespace) -> PluginOptions:
    return PluginOptions(
        node=args.node,
        versions=tuple(args.dra_version or ("v1.DRAPlugin",)),
        instance=args.instance,
        admin=not args.no_admin,
    )


def allocated(ctx: PluginContext, ref: ClaimRef) -> bool:
    """A structured (``resource.k8s.io``) claim with an allocation."""
    claim = ctx.get_claim(ref)
    return claim is not None and claim.status.allocation is not None


def main_for(
    make_driver: MakeDriver,
    options: PluginOptions,
    after_start: AfterStart | None = None,
    *,
    kinds: frozenset[str] = STRUCTURED_KINDS,
    ready: ClaimReady = allocated,
) -> Callable[[ServiceContext], Coroutine[Any, Any, None]]:
    """``kinds``: what the plugin's view of the log follows (the claims it reads, and what else
    the driver needs); ``ready``: when a claim asked for is there to be prepared."""

    async def main(ctx: ServiceContext) -> None:
        rt = Runtime(ctx.store, actor=f"kubelet-plugin/{options.node}", node=options.node)
        rt.kinds = kinds
        await rt.start()
        pctx = PluginContext(options.node, ctx.settings, rt)
        server: PluginServer | None = None
        admin: AdminEndpoint | None = None

        changed = asyncio.Event()
        rt.cache.listen(lambda *_: changed.set())

        def node_changed(kind: str, *_: object) -> None:
            # a driver whose capacity follows the Node (the frobnicator demo's label) looks again
            if kind == "Node" and server is not None:
                server.capacity_changed()

        rt.cache.listen(node_changed)

        async def wait_for_claims(refs: Sequence[ClaimRef]) -> None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + options.claim_wait_s
            while any(not ready(pctx, r) for r in refs):
                changed.clear()
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return  # the driver answers for them (not found, not allocated)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)

        try:
            driver = make_driver(pctx)
            server = PluginServer(
                Faulty(driver, pctx.failures),
                registry_dir=sockets.registry_dir(ctx.settings.data_dir, options.node),
                plugins_dir=pctx.plugins_dir,
                versions=options.versions,
                instance=options.instance,
                failures=pctx.failures,
                before_prepare=wait_for_claims,
            )
            await server.start()
            if options.admin:
                path = admin_path(pctx.plugins_dir, driver.driver_name, options.instance)
                admin = AdminEndpoint(path, pctx.failures, server.calls, on_change=server.health_changed)
                await admin.start()
            if after_start is not None:
                await rt.wait_for_apiserver()
                await after_start(pctx, driver)
            print(
                f"{driver.driver_name} plugin on {options.node}: serving {', '.join(options.versions)} "
                f"at {server.endpoint}",
                flush=True,
            )
            await ctx.stop.wait()
        finally:
            if admin is not None:
                await admin.stop()
            if server is not None:
                await server.stop()
            await rt.stop()

    return main


def run_plugin(
    name: str,
    make_driver: MakeDriver,
    options: PluginOptions,
    after_start: AfterStart | None = None,
    *,
    kinds: frozenset[str] = STRUCTURED_KINDS,
    ready: ClaimReady = allocated,
) -> int:
    """Run the plugin process until SIGTERM; returns its exit code."""
    return run_service(
        f"{name}-{options.node}",
        main_for(make_driver, options, after_start, kinds=kinds, ready=ready),
        on_stream_reset="rebuild",
        role=f"kubelet-{options.node}",
    )


def plugin_main(
    name: str,
    driver_for: Callable[[argparse.Namespace], MakeDriver],
    *,
    prog: str,
    description: str | None = None,
    add_args: Callable[[argparse.ArgumentParser], None] | None = None,
    after_start: AfterStart | None = None,
    argv: Sequence[str] | None = None,
) -> int:
    """A driver's ``__main__`` in one call: the common options (``add_plugin_args``) and the
    driver's own (``add_args``), then ``run_plugin`` with what ``driver_for(args)`` returns. A
    ``ValueError`` from ``driver_for`` is a bad option: its message and the usage, exit code 2."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    add_plugin_args(p)
    if add_args is not None:
        add_args(p)
    args = p.parse_args(argv)
    try:
        make_driver = driver_for(args)
    except ValueError as exc:
        p.error(str(exc))
    return run_plugin(name, make_driver, options_from_args(args), after_start)
