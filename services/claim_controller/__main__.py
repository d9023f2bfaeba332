"""``python -m draflow.services.claim_controller``: the resource claim controller until SIGTERM."""

from __future__ import annotations

if __name__ == "__main__":
    # run as a service: a SIGTERM or Ctrl-C that arrives while the imports below load is recorded,
    # then stops the service cleanly (draflow.infra.signals)
    from draflow.infra.signals import install_early

    install_early()

import gc
import sys

from draflow.infra.service import ServiceContext, run_service
from draflow.services.claim_controller.service import ACTOR, SWEEP_WAKE_S, ClaimControllerService
from draflow.services.runtime.controller import Runtime


async def main(ctx: ServiceContext) -> None:
    rt = Runtime(ctx.store, actor=ACTOR, snapshot_writer=True)
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

        # woken often enough for the resync sweep to keep its pace when nothing else happens; no
        # batching window: a pass starts as soon as a change lands (its pods are synced
        # concurrently, so a burst of changes costs one short pass, not a wait)
        await rt.run(ctx.stop, sync, resync_s=SWEEP_WAKE_S, settle_s=0.0)
    finally:
        await rt.stop()


if __name__ == "__main__":
    sys.exit(run_service(ACTOR, main))
