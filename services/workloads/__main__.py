"""``python -m services.workloads``: the Deployment / Job controller until SIGTERM."""

from __future__ import annotations

import sys

from infra.service import ServiceContext, run_service
from services.claim_controller.runtime import Runtime
from services.workloads.service import ACTOR, WorkloadsService


async def main(ctx: ServiceContext) -> None:
    rt = Runtime(ctx.store, actor=ACTOR)
    await rt.start()
    await rt.wait_for_apiserver()
    try:
        print(f"{ACTOR}: following {ctx.settings.root}.ev.> on {ctx.settings.nats_url}", flush=True)
        await rt.run(ctx.stop, WorkloadsService(rt).sync, resync_s=1.0)
    finally:
        await rt.stop()


if __name__ == "__main__":
    sys.exit(run_service(ACTOR, main))
