"""``python -m services.driver_controller``: the classic DRA driver controller until SIGTERM.

Hosts the plugins of ``draflow.classic_drivers`` (all installed ones, or the comma-separated
``DRAFLOW_CLASSIC_DRIVERS``); in a checkout whose editable install predates the group, the
entry points declared in its pyproject.toml. ``DRAFLOW_CLASSIC_DRIVER_OPTIONS`` (JSON, driver
name -> factory keyword options) configures them, e.g.
``{"fpga.example.com": {"programming_delay_s": 2.0}}``; ``DRAFLOW_CLASSIC_RETRY_ATTEMPTS``
bounds the saga step retries (default 8).

On start the plugins first get their inventory and the allocated claims (``prime``), then the
sagas a killed predecessor left are finished (``resume``), then the passes begin.
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from infra.service import ServiceContext, run_service
from services.dra.classic.plugin import (
    ENTRY_POINT_GROUP,
    ControllerPlugin,
    declared_entry_points,
    load_plugins,
)
from services.driver_controller.service import ACTOR, DriverControllerService
from services.runtime.controller import Runtime

# Factory options per driver; DRAFLOW_CLASSIC_DRIVER_OPTIONS (JSON, same shape) overrides them.
DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {"fpga.example.com": {"programming_delay_s": 0.3}}


def driver_options(raw: str | None) -> dict[str, dict[str, Any]]:
    options = {name: dict(opts) for name, opts in DEFAULT_OPTIONS.items()}
    for name, opts in (json.loads(raw) if raw else {}).items():
        options.setdefault(name, {}).update(opts)
    return options


def _plugins() -> dict[str, ControllerPlugin]:
    wanted = os.environ.get("DRAFLOW_CLASSIC_DRIVERS")
    names = [n.strip() for n in wanted.split(",") if n.strip()] if wanted else None
    available = None
    if not entry_points(group=ENTRY_POINT_GROUP):  # a checkout installed before the group existed
        available = declared_entry_points(Path(__file__).resolve().parents[2] / "pyproject.toml")
    options = driver_options(os.environ.get("DRAFLOW_CLASSIC_DRIVER_OPTIONS"))
    return load_plugins(names, available=available, options=options)


async def main(ctx: ServiceContext) -> None:
    plugins = _plugins()
    rt = Runtime(ctx.store, actor=ACTOR)
    await rt.start()
    try:
        # Saga steps are retried with backoff (0.05 s doubling, at most 2 s per wait); the FPGA's
        # programming delay must fit in these retries or the allocation is compensated.
        attempts = int(os.environ.get("DRAFLOW_CLASSIC_RETRY_ATTEMPTS", "8"))
        service = DriverControllerService(rt, plugins, retry_attempts=attempts)
        # Inventory and allocated claims first: resumed saga steps ask the plugins, which would
        # otherwise allocate against empty books (a device handed out twice after a restart).
        service.prime()
        await service.resume()
        print(
            f"{ACTOR}: drivers {', '.join(sorted(plugins)) or 'none'} on {ctx.settings.nats_url}", flush=True
        )
        await rt.run(ctx.stop, service.sync)
    finally:
        await rt.stop()


if __name__ == "__main__":
    sys.exit(run_service(ACTOR, main))
