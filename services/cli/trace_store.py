"""The trace store ``draflow trace`` reads: the ``otlp`` service or a real Jaeger query service.

Both answer Jaeger's query API (``GET /api/traces``, ``/api/traces/{id}``, ``/api/services``). The
URL comes from ``--query-url``, else ``$DRAFLOW_TRACE_QUERY_URL``, else the OTLP/HTTP endpoint the
services export to (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._TRACES_ENDPOINT``: the ``otlp`` service
answers queries on the same port, so one setting serves both), else the Procfile's ``otlp`` service
(``http://127.0.0.1:4318`` plus ``DRAFLOW_PORT_OFFSET``), and every error says which of them it was
and what to set: an unreachable store, a URL that is not a query API at all (Jaeger's OTLP port
instead of its query port, say), a store that answers with something else than JSON.
Jaeger only searches within one service (``service`` is required there); when a search without
one is refused, it is repeated for each service the store knows.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from draflow.infra import tracing
from draflow.infra.ports import Ports
from draflow.services.cli.main import UserError

__all__ = ["QUERY_URL_VAR", "TraceStore"]

QUERY_URL_VAR = "DRAFLOW_TRACE_QUERY_URL"
JAEGER_HINT = "its UI port, e.g. http://127.0.0.1:16686, not its OTLP port 4318"


def _strip_api(url: str) -> str:
    """Accept the base, ``…/api`` or ``…/api/traces`` (what Jaeger's docs show)."""
    url = url.strip().rstrip("/")
    for suffix in ("/api/traces", "/api"):
        if url.endswith(suffix):
            return url[: -len(suffix)]
    return url


def _from_otlp_endpoint(env: Mapping[str, str]) -> tuple[str, str] | None:
    """The query URL the services' own OTLP/HTTP endpoint implies: the ``otlp`` service answers
    both on one port, so what the services export to is what ``trace`` reads, with one setting.
    None when no endpoint is set or it is OTLP/gRPC (whose port serves no query API)."""
    target = tracing.export_target(env)
    if target is None or target.protocol == "grpc" or not target.source.startswith("OTEL_"):
        return None
    url = target.url.rstrip("/")
    base = url[: -len("/v1/traces")] if url.endswith("/v1/traces") else url
    return base, f"derived from {target.source} ({target.url}; set {QUERY_URL_VAR} for a Jaeger's query port)"


class TraceStore:
    def __init__(self, url: str, source: str) -> None:
        self.url = _strip_api(url)
        self.source = source  # how the URL was chosen, for error messages

    @classmethod
    def from_args(cls, query_url: str | None) -> TraceStore:
        if query_url:
            return cls(query_url, "--query-url")
        if env := os.environ.get(QUERY_URL_VAR):
            return cls(env, QUERY_URL_VAR)
        derived = _from_otlp_endpoint(os.environ)
        if derived is not None:
            return cls(*derived)
        ports = Ports.from_env()
        how = f"DRAFLOW_PORT_OFFSET={ports.offset}" if ports.offset else "DRAFLOW_PORT_OFFSET unset"
        return cls(
            ports.otlp_http_url,
            f"the otlp service's default address ({how}; set {QUERY_URL_VAR} for another store)",
        )

    @property
    def where(self) -> str:
        return f"{self.url} ({self.source})"

    def _not_query_api(self, path: str, what: str) -> UserError:
        return UserError(
            f"{self.where} does not answer Jaeger's query API (GET {path}: {what}): point {QUERY_URL_VAR} "
            f"or --query-url at the otlp service (http://127.0.0.1:4318 plus DRAFLOW_PORT_OFFSET) or at a "
            f"Jaeger's query service ({JAEGER_HINT})"
        )

    def get(self, path: str, params: list[tuple[str, str]] | None = None) -> tuple[int, dict[str, Any]]:
        """``(status, JSON body)``; 200 and Jaeger-shaped errors (404 trace not found, 400 bad
        query) are returned, anything else is a ``UserError`` that says what is wrong."""
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                status, body = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UserError(
                f"cannot reach the trace store at {self.where}: {reason}. Is the otlp service running "
                f"(honcho start)? With a Jaeger, set {QUERY_URL_VAR} to its query service ({JAEGER_HINT})"
            ) from None
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not ("data" in doc or "errors" in doc):
            raise self._not_query_api(path, f"HTTP {status}, not a Jaeger JSON answer")
        if status not in (200, 400, 404):
            errors = "; ".join(str(e.get("msg", e)) for e in doc.get("errors") or [] if isinstance(e, dict))
            raise UserError(f"trace store {self.where}: GET {path}: HTTP {status}: {errors or 'failed'}")
        return status, doc

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        """The trace with this id (empty when the store has none of its spans)."""
        status, doc = self.get(f"/api/traces/{trace_id}")
        if status == 400:
            raise self._error(f"/api/traces/{trace_id}", doc)
        return list(doc.get("data") or []) if status == 200 else []

    def search(self, params: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """Traces with a span matching ``params``; per service when the store insists on one."""
        status, doc = self.get("/api/traces", params)
        if status == 200:
            return list(doc.get("data") or [])
        if status == 404:  # a query API without search
            raise self._not_query_api("/api/traces", "HTTP 404")
        _, services = self.get("/api/services")
        found: list[dict[str, Any]] = []
        for service in services.get("data") or []:
            status, doc = self.get("/api/traces", [("service", str(service)), *params])
            if status != 200:
                raise self._error("/api/traces", doc)
            found += doc.get("data") or []
        return found

    def _error(self, path: str, doc: dict[str, Any]) -> UserError:
        errors = "; ".join(str(e.get("msg", e)) for e in doc.get("errors") or [] if isinstance(e, dict))
        return UserError(f"trace store {self.where}: GET {path}: {errors or 'refused'}")
