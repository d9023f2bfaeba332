"""``python -m services.garbage_collector``: the garbage collector until SIGTERM."""

from __future__ import annotations

import argparse
import sys

from infra.config import add_nats_url_arg
from infra.metrics import add_metrics_arg
from infra.service import ServiceContext, run_service
from services.garbage_collector.service import ACTOR, GarbageCollectorService
from services.runtime.controller import Runtime


async def main(ctx: ServiceContext) -> None:
    rt = Runtime(ctx.store, actor=ACTOR)
    await rt.start()
    await rt.wait_for_apiserver()
    try:
        print(f"{ACTOR}: following {ctx.settings.root}.ev.> on {ctx.settings.nats_url}", flush=True)
        await rt.run(ctx.stop, GarbageCollectorService(rt).sync, resync_s=30.0)
    finally:
        await rt.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m services.garbage_collector", description=__doc__)
    add_metrics_arg(parser)  # read by infra.service.run_service
    add_nats_url_arg(parser)  # read by infra.service.run_service
    parser.parse_args()
    sys.exit(run_service(ACTOR, main))
