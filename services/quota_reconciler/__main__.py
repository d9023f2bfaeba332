"""``python -m services.quota_reconciler``: ResourceQuota ``status`` (hard/used) until SIGTERM.

Replays the log at start (usage is rebuilt, never stored), then follows it; status is written
through the apiserver (``ApiClient.update_status`` with the quota's resourceVersion). The client
keeps retrying while no apiserver answers yet, so starting together with it under honcho is fine.
"""

from __future__ import annotations

import sys

from infra.service import ServiceContext, run_service
from services.quota_reconciler.service import ACTOR, QuotaReconciler
from services.runtime.client import ApiClient


async def main(ctx: ServiceContext) -> None:
    api = ApiClient(
        ctx.store.nc, ctx.settings, actor=ACTOR
    )  # the service's connection, closed by run_service
    reconciler = QuotaReconciler(ctx.store, api)
    print(f"{ACTOR}: following {ctx.settings.root}.ev.> on {ctx.settings.nats_url}", flush=True)
    await reconciler.run(ctx.stop)


if __name__ == "__main__":
    sys.exit(run_service(ACTOR, main))
