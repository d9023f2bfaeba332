"""``python -m services.scheduler``: the scheduler service, until SIGTERM / SIGINT.

Settings from the environment (``DRAFLOW_NATS_URL``, ``DRAFLOW_DATA_DIR``, ...; see
``infra.service``). ``DRAFLOW_SCHEDULER_ID`` names this instance (saga ids carry it; default
``scheduler``); several instances may run against one stream, each with its own id (saga ids must
not collide): optimistic concurrency on every claim and pod decides races, the loser compensates.
"""

from __future__ import annotations

import gc
import os
import sys

from infra.service import ServiceContext, run_service
from services.apiserver.client import ApiClient
from services.scheduler.service import SchedulerService


async def main(ctx: ServiceContext) -> None:
    api = ApiClient(ctx.store.nc, ctx.settings, timeout_s=5.0, actor="scheduler")
    instance = os.environ.get("DRAFLOW_SCHEDULER_ID", "scheduler")
    service = SchedulerService(ctx.store, instance=instance, api=api)
    await service.start()
    # The snapshot just folded from the log lives as long as the process: move it out of the
    # cyclic GC's reach so collections stop rescanning it (docs/scheduler.md: ~15 % GC per decision).
    gc.collect()
    gc.freeze()
    await service.run(ctx.stop)


if __name__ == "__main__":
    sys.exit(run_service("scheduler", main))
