"""``python -m services.node_lifecycle``: the node lifecycle controller until SIGTERM.

kube-controller-manager's flags (Go durations: ``40s``, ``500ms``): ``--node-monitor-period``
(5s), ``--node-monitor-grace-period`` (40s), ``--node-startup-grace-period`` (60s),
``--unhealthy-zone-threshold`` (0.55), ``--large-cluster-size-threshold`` (50), and
``--pod-gc-orphan-quarantine`` (40s, upstream's fixed quarantine). How long a pod stays on an
unreachable node is the pod's ``tolerationSeconds``, which the apiserver's
``--default-unreachable-toleration-seconds`` defaults (300).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from infra.config import add_nats_url_arg
from infra.metrics import add_metrics_arg
from infra.service import ServiceContext, run_service
from services.node_lifecycle.config import LifecycleConfig, parse_duration
from services.node_lifecycle.service import ACTOR, NodeLifecycleService
from services.runtime.controller import Runtime


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> LifecycleConfig:
    d = LifecycleConfig()
    p = argparse.ArgumentParser(prog="python -m services.node_lifecycle", description=__doc__)
    p.add_argument("--node-monitor-period", type=_duration, default=d.monitor_period_s, metavar="DURATION")
    p.add_argument(
        "--node-monitor-grace-period",
        type=_duration,
        default=d.grace_period_s,
        metavar="DURATION",
        help="how long a node may be silent before it is marked Unknown (default 40s)",
    )
    p.add_argument(
        "--node-startup-grace-period", type=_duration, default=d.startup_grace_period_s, metavar="DURATION"
    )
    p.add_argument("--unhealthy-zone-threshold", type=float, default=d.unhealthy_zone_threshold)
    p.add_argument("--large-cluster-size-threshold", type=int, default=d.large_cluster_threshold)
    p.add_argument(
        "--pod-gc-orphan-quarantine", type=_duration, default=d.orphan_quarantine_s, metavar="DURATION"
    )
    add_metrics_arg(p)  # read by infra.service.run_service
    add_nats_url_arg(p)  # read by infra.service.run_service
    a = p.parse_args(argv)
    if a.node_monitor_period <= 0:
        p.error("--node-monitor-period: must be greater than 0")
    if not 0 < a.unhealthy_zone_threshold <= 1:
        p.error("--unhealthy-zone-threshold: must be in (0, 1]")
    return LifecycleConfig(
        monitor_period_s=a.node_monitor_period,
        grace_period_s=a.node_monitor_grace_period,
        startup_grace_period_s=a.node_startup_grace_period,
        unhealthy_zone_threshold=a.unhealthy_zone_threshold,
        large_cluster_threshold=a.large_cluster_size_threshold,
        orphan_quarantine_s=a.pod_gc_orphan_quarantine,
    )


def make_main(cfg: LifecycleConfig) -> Callable[[ServiceContext], Coroutine[Any, Any, None]]:
    async def main(ctx: ServiceContext) -> None:
        rt = Runtime(ctx.store, actor=ACTOR)
        await rt.start()
        await rt.wait_for_apiserver()
        try:
            service = NodeLifecycleService(rt, cfg)
            print(
                f"{ACTOR}: watching nodes (grace {cfg.grace_period_s:g}s, every {cfg.monitor_period_s:g}s)",
                flush=True,
            )
            await rt.run(ctx.stop, service.sync, resync_s=cfg.monitor_period_s)
        finally:
            await rt.stop()

    return main


if __name__ == "__main__":
    sys.exit(run_service(ACTOR, make_main(parse_args())))
