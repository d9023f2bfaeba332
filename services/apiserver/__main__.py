"""``python -m services.apiserver``: run the API server until SIGTERM / SIGINT.

Configuration comes from the environment (``infra.config.Settings``: ``DRAFLOW_NATS_URL``,
``DRAFLOW_STREAM``, ``DRAFLOW_SUBJECT_ROOT``...); spans go to the system's ``otlp`` receiver unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` says otherwise (``infra/tracing.py``).
It runs under the shared service runner, so a SIGTERM while it still waits for nats-server (honcho
starts everything at once) stops it cleanly, like every other service.
"""

from __future__ import annotations

import sys

from infra.service import ServiceContext, run_service
from services.apiserver.server import ApiServer


async def serve(ctx: ServiceContext) -> None:
    server = ApiServer(ctx.store)
    try:
        await server.start()
        # Tests and the demo wait for this line: the API answers from here on.
        print(f"apiserver: serving {ctx.settings.root}.api.* on {ctx.settings.nats_url}", flush=True)
        await ctx.stop.wait()
    finally:
        await server.stop()


def main() -> None:
    sys.exit(run_service("apiserver", serve))


if __name__ == "__main__":
    main()
