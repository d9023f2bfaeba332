"""``python -m draflow.services.device_taint_eviction``: the device taint eviction controller until SIGTERM.

Pods whose allocated devices carry a NoExecute taint (from their ResourceSlice or a
DeviceTaintRule) that the claim does not tolerate are evicted once the taint's ``timeAdded`` plus
the toleration's ``tolerationSeconds`` has passed; each DeviceTaintRule's status says how far
eviction got (``EvictionInProgress``).
"""

from __future__ import annotations

if __name__ == "__main__":
    # run as a service: a SIGTERM or Ctrl-C that arrives while the imports below load is recorded,
    # then stops the service cleanly (draflow.infra.signals)
    from draflow.infra.signals import install_early

    install_early()

import argparse
import sys

from draflow.infra.config import add_nats_url_arg
from draflow.infra.metrics import add_metrics_arg
from draflow.infra.service import ServiceContext, run_service
from draflow.services.device_taint_eviction.service import ACTOR, DeviceTaintEvictionService
from draflow.services.runtime.controller import Runtime


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m draflow.services.device_taint_eviction", description=__doc__)
    add_metrics_arg(p)  # read by draflow.infra.service.run_service
    add_nats_url_arg(p)  # read by draflow.infra.service.run_service
    return p.parse_args(argv)


async def main(ctx: ServiceContext) -> None:
    rt = Runtime(ctx.store, actor=ACTOR)
    await rt.start()
    await rt.wait_for_apiserver()
    try:
        print(f"{ACTOR}: following {ctx.settings.root}.ev.> on {ctx.settings.nats_url}", flush=True)
        await rt.run(ctx.stop, DeviceTaintEvictionService(rt).sync, resync_s=30.0)
    finally:
        await rt.stop()


if __name__ == "__main__":
    parse_args()
    sys.exit(run_service(ACTOR, main))
