"""``python -m services.scheduler``: the scheduler service, until SIGTERM / SIGINT.

Settings from the environment (``DRAFLOW_NATS_URL``, ``DRAFLOW_DATA_DIR``, ...; see
``infra.service``). ``DRAFLOW_SCHEDULER_ID`` names this instance (saga ids carry it; default
``scheduler``); several instances may run against one stream, each with its own id (saga ids must
not collide): optimistic concurrency on every claim and pod decides races, the loser compensates
only what its own saga wrote. The id is also this process's actor in the log (every envelope it
appends) and its Events' ``reportingInstance`` (``default-scheduler-<id>``).
"""

from __future__ import annotations

import gc
import os
import sys

from infra.service import ServiceContext, run_service
from services.runtime.client import ApiClient
from services.scheduler.service import SchedulerService
from services.scheduler.service.runner import instance_name


def instance_id() -> str:
    return instance_name(os.environ.get("DRAFLOW_SCHEDULER_ID", "scheduler"))


async def main(ctx: ServiceContext) -> None:
    instance = instance_id()
    api = ApiClient(ctx.store.nc, ctx.settings, timeout_s=5.0, actor=instance)
    service = SchedulerService(ctx.store, instance=instance, api=api)
    await service.start()
    # caught up with the log and finished what earlier instances left: deciding from now on
    print(f"{instance}: scheduling from {ctx.settings.root}.ev.> on {ctx.settings.nats_url}", flush=True)
    # The snapshot just folded from the log lives as long as the process: move it out of the
    # cyclic GC's reach so collections stop rescanning it (docs/scheduler.md: ~15 % GC per decision).
    gc.collect()
    gc.freeze()
    await service.run(ctx.stop)


if __name__ == "__main__":
    sys.exit(run_service("scheduler", main, actor=instance_id()))
