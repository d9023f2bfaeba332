"""A small HTTP/1.1 server on asyncio streams: OTLP/HTTP ingest and a Jaeger-shaped query API.

* ``POST /v1/traces`` - an ``ExportTraceServiceRequest`` as protobuf (``application/x-protobuf``)
  or OTLP/JSON (``application/json``), optionally gzip-compressed; answers in the same encoding.
* ``GET /api/services``, ``GET /api/services/{service}/operations``
* ``GET /api/traces?service=&operation=&tag=key:value&tags={json}&start=&end=&limit=`` (start/end
  in µs since the epoch, as Jaeger's API), ``GET /api/traces/{traceID}``

Answers are ``{"data": [...]}`` like Jaeger's query service, so ``draflow trace`` works against
either. Keep-alive connections are served request after request (the OTLP exporter reuses one).
SQLite is called on the event loop: each call is short, and this is a debugging service.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import urllib.parse
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from draflow.services.otlp.jaeger import jaeger_trace
from draflow.services.otlp.model import BadRequest, decode_request, spans_of
from draflow.services.otlp.store import SpanStore, TraceQuery

__all__ = ["OtlpServer"]

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024 * 1024
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
}
JSON = "application/json"


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class OtlpServer:
    def __init__(self, store: SpanStore) -> None:
        self.store = store
        self.server: asyncio.Server | None = None
        self.received = 0
        self._activity = asyncio.Event()  # set by every export request and closed connection
        self._last_ingest = 0.0  # loop time of the last export request (HTTP or gRPC)
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the port (useful with port 0)."""
        self.server = await asyncio.start_server(self._serve, host, port)
        return int(self.server.sockets[0].getsockname()[1])

    def ingested(self, count: int) -> None:
        """Called for every export request, HTTP or gRPC."""
        self.received += count
        self._last_ingest = asyncio.get_running_loop().time()
        self._activity.set()

    async def drain(self, idle_s: float, max_s: float) -> None:
        """On a stop, keep receiving (at most ``max_s``) until every exporter's connection is gone
        and no export came for ``idle_s``: the other services flush their last spans on the same
        signal, some only after their own work stopped, then exit (closing their keep-alive
        connection). Wakes on each export and each closed connection, no polling."""
        loop = asyncio.get_running_loop()
        end = loop.time() + max_s
        self._last_ingest = max(self._last_ingest, loop.time())
        while (now := loop.time()) < end:
            idle_for = now - self._last_ingest
            if not self._connections and idle_for >= idle_s:
                return
            self._activity.clear()
            wait = end - now if self._connections else min(end - now, idle_s - idle_for)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._activity.wait(), wait)

    async def close(self) -> None:
        """Stop listening and end every open (keep-alive) connection: each handler returns on its
        own, so none is left to be cancelled by ``asyncio.run`` (which Python 3.11's streams
        would log as a ``CancelledError`` traceback per connection)."""
        if self.server is not None:
            self.server.close()
        for writer in self._connections.values():
            writer.close()
        if self._connections:
            _, pending = await asyncio.wait(set(self._connections), timeout=1.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        try:
            await self._requests(reader, writer)
        except asyncio.CancelledError:  # only from close(): the connection ends here, quietly
            pass
        finally:
            del self._connections[task]
            self._activity.set()
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line.strip():
                    return
                method, target, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    key, _, value = h.decode("latin-1").partition(":")
                    headers[key.strip().lower()] = value.strip()
                if headers.get("expect", "").lower() == "100-continue":  # curl, for larger bodies
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await writer.drain()
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    body = await self._read_chunked(reader)
                else:
                    length = int(headers.get("content-length") or 0)
                    if length > MAX_BODY:
                        await self._respond(writer, 413, b"body too large", "text/plain", close=True)
                        return
                    body = await reader.readexactly(length) if length else b""
                status, payload, ctype = self._dispatch(method, target, headers, body)
                close = headers.get("connection", "").lower() == "close"
                await self._respond(writer, status, payload, ctype, close=close)
                if close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return

    @staticmethod
    async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            n = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if n == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(parts)
            size += n
            if size > MAX_BODY:
                raise ValueError("chunked body too large")
            parts.append(await reader.readexactly(n))
            await reader.readline()

    async def _respond(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str, *, close: bool
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: {'close' if close else 'keep-alive'}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()

    def _dispatch(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes, str]:
        url = urllib.parse.urlsplit(target)
        path = url.path.rstrip("/")
        try:
            if path == "/v1/traces":
                if method != "POST":
                    raise HttpError(405, "POST an OTLP ExportTraceServiceRequest")
                return self._ingest(headers, body)
            if method != "GET":
                raise HttpError(405, f"{method} {path}: only GET")
            return 200, json.dumps(self._query(path, urllib.parse.parse_qs(url.query))).encode(), JSON
        except HttpError as exc:
            error = {"data": None, "errors": [{"code": exc.status, "msg": str(exc)}]}
            return exc.status, json.dumps(error).encode(), JSON
        except Exception as exc:  # a storage failure: the exporter retries on 5xx
            log.exception("%s %s failed", method, path)
            error = {"data": None, "errors": [{"code": 500, "msg": f"{type(exc).__name__}: {exc}"}]}
            return 500, json.dumps(error).encode(), JSON

    def _ingest(self, headers: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        if headers.get("content-encoding", "").lower() == "gzip":
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError) as exc:
                raise HttpError(400, f"bad gzip body: {exc}") from None
        ctype = headers.get("content-type", "application/x-protobuf")
        try:
            spans = spans_of(decode_request(body, ctype))
        except BadRequest as exc:
            raise HttpError(400, str(exc)) from None
        self.ingested(self.store.add(spans))
        if ctype.startswith("application/json"):
            return 200, b"{}", "application/json"
        return 200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf"

    def _query(self, path: str, params: dict[str, list[str]]) -> dict[str, Any]:
        parts = path.strip("/").split("/")
        if parts == ["api", "services"]:
            return {"data": self.store.services()}
        if len(parts) == 4 and parts[:2] == ["api", "services"] and parts[3] == "operations":
            return {"data": self.store.operations(urllib.parse.unquote(parts[2]))}
        if parts == ["api", "traces"]:
            ids = self.store.find(trace_query(params))
            return {"data": [jaeger_trace(t) for t in self.store.traces(ids)]}
        if len(parts) == 3 and parts[:2] == ["api", "traces"]:
            spans = self.store.trace(parts[2])
            if not spans:
                raise HttpError(404, f"trace {parts[2]} not found")
            return {"data": [jaeger_trace(spans)]}
        raise HttpError(404, f"{path}: no such endpoint")


def trace_query(params: dict[str, list[str]]) -> TraceQuery:
    """Jaeger's query parameters: ``tag=key:value`` (repeatable) and/or ``tags={"key": "value"}``."""
    tags: dict[str, str] = {}
    for t in params.get("tag", []):
        key, sep, value = t.partition(":")
        if not sep:
            raise HttpError(400, f"tag={t!r}: expected key:value")
        tags[key] = value
    for blob in params.get("tags", []):
        try:
            doc = json.loads(blob)
        except ValueError:
            raise HttpError(400, f"tags={blob!r}: not a JSON object") from None
        if not isinstance(doc, dict):
            raise HttpError(400, f"tags={blob!r}: not a JSON object")
        tags.update({str(k): str(v) for k, v in doc.items()})

    def one(name: str, default: int) -> int:
        value = params.get(name, [""])[0]
        try:
            return int(value) if value else default
        except ValueError:
            raise HttpError(400, f"{name}={value!r}: not an integer") from None

    return TraceQuery(
        service=params.get("service", [""])[0],
        operation=params.get("operation", [""])[0],
        tags=tags,
        start_us=one("start", 0),
        end_us=one("end", 0),
        limit=one("limit", 20),
    )
