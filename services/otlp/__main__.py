"""``python -m draflow.services.otlp``: the Procfile's ``otlp`` process, the system's trace receiver.

Listens for OTLP/HTTP (and the query API) on ``DRAFLOW_OTLP_ADDR`` and for OTLP/gRPC on
``DRAFLOW_OTLP_GRPC_ADDR``; by default ``127.0.0.1:4318`` and ``127.0.0.1:4317`` (OTLP's ports)
plus ``DRAFLOW_PORT_OFFSET``, which is where the services export and ``draflow trace`` reads when
nothing else is set. Spans go to ``$DRAFLOW_DATA_DIR/otlp/spans.sqlite``, at most
``DRAFLOW_OTLP_MAX_SPANS`` (default 1,000,000; then the oldest traces are dropped). A port that is
taken (a real Jaeger already listens there) is reported and left alone; the rest of the system runs
unchanged. SIGTERM/SIGINT stop it with exit code 0, after the other services' last spans (they
flush on the same signal, then hang up) have arrived, or 3 s.
"""

from __future__ import annotations

if __name__ == "__main__":
    # run as a service: a SIGTERM or Ctrl-C that arrives while the imports below load is recorded,
    # then stops the service cleanly (draflow.infra.signals)
    from draflow.infra.signals import install_early

    install_early()

import asyncio
import errno
import logging
import os
import sys

from draflow.infra.config import Settings
from draflow.infra.ports import PortError, Ports
from draflow.infra.signals import stop_on_signals
from draflow.services.otlp.grpc_server import OtlpGrpcServer
from draflow.services.otlp.server import OtlpServer
from draflow.services.otlp.store import SpanStore

log = logging.getLogger("otlp")

DEFAULT_MAX_SPANS = 1_000_000  # then the oldest traces go (0 = keep everything)
DRAIN_IDLE_S = 0.3  # on a stop: keep receiving until the exporters hung up and none sent for this long...
DRAIN_MAX_S = 3.0  # ...but no longer than this (honcho kills after 5 s)


def listen_address(var: str, value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"error: {var}={value!r}: expected HOST:PORT")
    return host or "127.0.0.1", int(port)


async def main() -> int:
    try:
        ports = Ports.from_env()
    except PortError as exc:
        raise SystemExit(f"error: {exc}") from None
    http_addr = listen_address(
        "DRAFLOW_OTLP_ADDR", os.environ.get("DRAFLOW_OTLP_ADDR") or f"127.0.0.1:{ports.otlp_http}"
    )
    grpc_addr = listen_address(
        "DRAFLOW_OTLP_GRPC_ADDR", os.environ.get("DRAFLOW_OTLP_GRPC_ADDR") or f"127.0.0.1:{ports.otlp_grpc}"
    )
    settings = Settings.from_env()
    stop = stop_on_signals()
    max_spans = os.environ.get("DRAFLOW_OTLP_MAX_SPANS") or str(DEFAULT_MAX_SPANS)
    if not max_spans.isdigit():
        raise SystemExit(f"error: DRAFLOW_OTLP_MAX_SPANS={max_spans!r}: expected a whole number")
    store = SpanStore(settings.service_dir("otlp") / "spans.sqlite", max_spans=int(max_spans))
    server = OtlpServer(store)
    grpc_server = OtlpGrpcServer(store, server.ingested)
    listening: list[str] = []
    try:
        for proto, (host, port), start in (
            ("OTLP/HTTP", http_addr, server.start),
            ("OTLP/gRPC", grpc_addr, grpc_server.start),
        ):
            try:
                bound = await start(host, port)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                log.warning(
                    "%s:%d is in use (a Jaeger or another receiver?): not receiving %s here",
                    host,
                    port,
                    proto,
                )
                continue
            scheme = "http" if proto == "OTLP/HTTP" else "grpc"
            listening.append(f"{scheme}://{host}:{bound}")
            what = "POST /v1/traces, GET /api/traces" if scheme == "http" else "TraceService/Export"
            log.info("%s receiver on %s://%s:%d (%s)", proto, scheme, host, bound, what)
        if listening:
            print("LISTENING " + " ".join(listening), flush=True)
        await stop.wait()
        if listening:
            await server.drain(DRAIN_IDLE_S, DRAIN_MAX_S)
        return 0
    finally:
        await grpc_server.close()
        await server.close()
        store.close()


if __name__ == "__main__":
    logging.basicConfig(
        level=os.environ.get("DRAFLOW_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    sys.exit(asyncio.run(main()))
