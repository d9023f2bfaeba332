"""``python -m services.driver_controller``: the classic DRA driver controller until SIGTERM.

Hosts the plugins of ``draflow.classic_drivers`` (all installed ones, or the comma-separated
``DRAFLOW_CLASSIC_DRIVERS``); in a checkout whose editable install predates the group, the
entry points declared in its pyproject.toml.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

from infra.service import ServiceContext, run_service
from services.claim_controller.runtime import Runtime
from services.driver_controller.plugin import (
    ENTRY_POINT_GROUP,
    ControllerPlugin,
    declared_entry_points,
    load_plugins,
)
from services.driver_controller.service import ACTOR, DriverControllerService


def _plugins() -> dict[str, ControllerPlugin]:
    wanted = os.environ.get("DRAFLOW_CLASSIC_DRIVERS")
    names = [n.strip() for n in wanted.split(",") if n.strip()] if wanted else None
    available = None
    if not entry_points(group=ENTRY_POINT_GROUP):  # a checkout installed before the group existed
        available = declared_entry_points(Path(__file__).resolve().parents[2] / "pyproject.toml")
    return load_plugins(names, available=available)


async def main(ctx: ServiceContext) -> None:
    plugins = _plugins()
    rt = Runtime(ctx.store, actor=ACTOR)
    await rt.start()
    try:
        service = DriverControllerService(rt, plugins)
        await service.resume()
        print(
            f"{ACTOR}: drivers {', '.join(sorted(plugins)) or 'none'} on {ctx.settings.nats_url}", flush=True
        )
        await rt.run(ctx.stop, service.sync)
    finally:
        await rt.stop()


if __name__ == "__main__":
    sys.exit(run_service(ACTOR, main))
