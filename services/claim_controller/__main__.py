"""``python -m services.claim_controller``: the resource claim controller until SIGTERM."""

from __future__ import annotations

import gc
import sys

from infra.service import ServiceContext, run_service
from services.claim_controller.service import ACTOR, ClaimControllerService
from services.runtime.controller import Runtime


async def main(ctx: ServiceContext) -> None:
    rt = Runtime(ctx.store, actor=ACTOR)
    await rt.start()
    await rt.wait_for_apiserver()
    try:
        print(f"{ACTOR}: following {ctx.settings.root}.ev.> on {ctx.settings.nats_url}", flush=True)
        service = ClaimControllerService(rt)
        frozen = False

        async def sync() -> None:
            nonlocal frozen
            await service.sync()
            if not frozen:  # after the first (full) pass that succeeded
                # the cache folded at start and what the first pass built live on: keep the
                # cyclic GC from rescanning them on every later collection
                gc.collect()
                gc.freeze()
                frozen = True

        await rt.run(ctx.stop, sync)
    finally:
        await rt.stop()


if __name__ == "__main__":
    sys.exit(run_service(ACTOR, main))
