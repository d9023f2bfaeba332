"""``python -m services.otlp``: the Procfile's ``otlp`` process.

Listens on ``DRAFLOW_OTLP_ADDR`` (default ``127.0.0.1:4318``, the OTLP/HTTP port, so services
export to it with ``OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318``) and stores spans in
``$DRAFLOW_DATA_DIR/otlp/spans.sqlite``, at most ``DRAFLOW_OTLP_MAX_SPANS`` (default 1,000,000;
then the oldest traces are dropped). If the port is taken (a real Jaeger already listens there)
it says so and stays idle until stopped, so the rest of the system runs unchanged. SIGTERM/SIGINT
stop it with exit code 0.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import sys

from infra.config import Settings
from infra.signals import stop_on_signals
from services.otlp.server import OtlpServer
from services.otlp.store import SpanStore

log = logging.getLogger("otlp")

DEFAULT_ADDR = "127.0.0.1:4318"
DEFAULT_MAX_SPANS = 1_000_000  # then the oldest traces go (0 = keep everything)


def listen_address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"error: DRAFLOW_OTLP_ADDR={value!r}: expected HOST:PORT")
    return host or "127.0.0.1", int(port)


async def main() -> int:
    host, port = listen_address(os.environ.get("DRAFLOW_OTLP_ADDR") or DEFAULT_ADDR)
    settings = Settings.from_env()
    stop = stop_on_signals()
    max_spans = os.environ.get("DRAFLOW_OTLP_MAX_SPANS") or str(DEFAULT_MAX_SPANS)
    if not max_spans.isdigit():
        raise SystemExit(f"error: DRAFLOW_OTLP_MAX_SPANS={max_spans!r}: expected a whole number")
    store = SpanStore(settings.service_dir("otlp") / "spans.sqlite", max_spans=int(max_spans))
    server = OtlpServer(store)
    try:
        try:
            bound = await server.start(host, port)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            log.warning("%s:%d is in use (a Jaeger or another receiver?): not receiving here", host, port)
            await stop.wait()
            return 0
        log.info("OTLP/HTTP receiver on http://%s:%d (POST /v1/traces, GET /api/traces)", host, bound)
        print(f"LISTENING http://{host}:{bound}", flush=True)
        await stop.wait()
        return 0
    finally:
        await server.close()
        store.close()


if __name__ == "__main__":
    logging.basicConfig(
        level=os.environ.get("DRAFLOW_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    sys.exit(asyncio.run(main()))
