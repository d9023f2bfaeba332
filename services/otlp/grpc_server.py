"""OTLP/gRPC ingest: ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` on grpc.aio.

The same decoding and store as OTLP/HTTP (``model.spans_of``), so a span sent either way is found
the same way. A request with malformed ids is refused with ``INVALID_ARGUMENT`` and stores
nothing; gzip-compressed requests are decompressed by gRPC itself.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
    TraceServiceServicer,
    add_TraceServiceServicer_to_server,
)

from draflow.services.otlp.model import BadRequest, spans_of
from draflow.services.otlp.store import SpanStore

__all__ = ["OtlpGrpcServer"]

MAX_MESSAGE = 64 * 1024 * 1024  # as the HTTP receiver's body limit


class _TraceService(TraceServiceServicer):
    def __init__(self, store: SpanStore, on_ingest: Callable[[int], None]) -> None:
        self.store = store
        self.on_ingest = on_ingest

    async def Export(
        self, request: ExportTraceServiceRequest, context: grpc.aio.ServicerContext
    ) -> ExportTraceServiceResponse:
        try:
            spans = spans_of(request)
        except BadRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        self.on_ingest(self.store.add(spans))
        return ExportTraceServiceResponse()


def port_free(host: str, port: int) -> bool:
    """Whether ``host:port`` can be bound. gRPC would say so too, but only after logging a C-core
    error line; and gRPC binds with SO_REUSEPORT by default (turned off below), which would let a
    second system's receiver share the first one's port and take half of its spans."""
    if port == 0:
        return True
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class OtlpGrpcServer:
    def __init__(self, store: SpanStore, on_ingest: Callable[[int], None]) -> None:
        self.server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", MAX_MESSAGE),
            ]
        )
        add_TraceServiceServicer_to_server(_TraceService(store, on_ingest), self.server)
        self.started = False

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the port. ``OSError(EADDRINUSE)`` when it is taken."""
        if not port_free(host, port):
            raise OSError(errno.EADDRINUSE, f"{host}:{port} is in use")
        try:
            bound = self.server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as exc:  # lost a race for the port after the check
            raise OSError(errno.EADDRINUSE, str(exc)) from None
        await self.server.start()
        self.started = True
        return bound

    async def close(self, grace_s: float = 0.5) -> None:
        if self.started:
            await self.server.stop(grace_s)
