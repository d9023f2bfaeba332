"""``python -m services.apiserver``: run the API server until SIGTERM / SIGINT.

Configuration comes from the environment (``infra.config.Settings``: ``DRAFLOW_NATS_URL``,
``DRAFLOW_STREAM``, ``DRAFLOW_SUBJECT_ROOT``...); ``OTEL_EXPORTER_OTLP_ENDPOINT`` turns tracing on.
"""

from __future__ import annotations

import asyncio
import logging
import os

from infra import tracing
from infra.config import Settings
from infra.eventstore import EventStore
from infra.signals import stop_on_signals
from services.apiserver.server import ApiServer

log = logging.getLogger("services.apiserver")


async def serve(settings: Settings) -> None:
    events = await EventStore.open(settings, actor="apiserver")
    server = ApiServer(events)
    stop = stop_on_signals()
    try:
        await server.start()
        print(f"apiserver: serving {settings.root}.api.* on {settings.nats_url}", flush=True)
        await stop.wait()
    finally:
        await server.stop()
        await events.close()
        tracing.shutdown_tracing()


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("DRAFLOW_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    tracing.setup_tracing("apiserver")
    asyncio.run(serve(Settings.from_env()))


if __name__ == "__main__":
    main()
