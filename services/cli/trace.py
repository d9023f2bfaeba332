"""``draflow trace pod NAME [-n NS]``: a pod's traces as a text waterfall or as a Jaeger JSON file.

Spans come from the trace store's query API (the ``otlp`` service, or a real Jaeger query service:
both answer ``GET /api/traces`` with ``{"data": [trace...]}`` in Jaeger's shape). A pod's traces
are found two ways and merged:

* by attributes: spans tagged ``k8s.pod.name``/``k8s.namespace.name``, and spans of appends to the
  pod's aggregate subject (``messaging.destination.name``);
* through the log (when NATS answers): the trace ids in the ``traceparent`` of every event on the
  pod's subject and of every saga the pod's events are correlated with.

``-o jaeger`` prints ``{"data": [{"traceID", "spans", "processes"}]}``, which Jaeger's UI opens
("Upload JSON").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import nats.errors

from events.codec import DecodeError, decode_raw
from events.subjects import aggregate_subject
from infra.config import Settings
from infra.errors import StoreUnavailable
from services.cli.export import settings_with_url
from services.cli.main import UserError

__all__ = ["register", "waterfall"]

DEFAULT_QUERY_URL = "http://127.0.0.1:4318"
BAR = 24


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="show traces (text waterfall or Jaeger JSON)")
    what = p.add_subparsers(dest="what", metavar="WHAT", required=True)
    pod = what.add_parser("pod", help="the traces of one pod's flow")
    pod.add_argument("name", help="pod name")
    pod.add_argument("-n", "--namespace", default="default", help="namespace (default: default)")
    pod.add_argument("-o", "--output", choices=("text", "jaeger"), default="text", help="output format")
    pod.add_argument(
        "--query-url",
        default=None,
        help=f"trace store query API (default: $DRAFLOW_TRACE_QUERY_URL or {DEFAULT_QUERY_URL})",
    )
    pod.add_argument("--no-log", action="store_true", help="do not look in the event log for trace ids")
    pod.add_argument("--nats-url", default=None, help="NATS URL (default: $DRAFLOW_NATS_URL)")
    pod.set_defaults(func=run)
    one = what.add_parser("id", help="one trace by its id (e.g. from an event's traceparent)")
    one.add_argument("trace_id", help="32 hex digits")
    one.add_argument("-o", "--output", choices=("text", "jaeger"), default="text", help="output format")
    one.add_argument("--query-url", default=None, help="trace store query API (as for trace pod)")
    one.set_defaults(func=run_id)


def _get(base: str, path: str, params: list[tuple[str, str]] | None = None) -> Any:
    url = base.rstrip("/") + path + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {"data": []}
        raise UserError(f"trace store {base}: {path}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        msg = f"cannot reach the trace store at {base}: {reason} (is the otlp service running?)"
        raise UserError(msg) from None


def trace_ids_from_log(settings: Settings, namespace: str, name: str, kind: str = "Pod") -> set[str]:
    """Trace ids in the traceparents of the object's (a pod's) events and of the sagas they belong to."""

    async def collect() -> set[str]:
        from infra.eventstore import EventStore

        try:
            store = await EventStore.open(settings, "draflow-cli", ensure=False, connect_timeout_s=2.0)
        except (OSError, TimeoutError, nats.errors.Error):
            return set()
        ids: set[str] = set()
        sagas: set[str] = set()
        try:
            async for records in store.read_raw(store.subject(kind, namespace, name)):
                for rec in records:
                    try:
                        env = decode_raw(rec.data, rec.seq)
                    except DecodeError:
                        continue
                    if env.traceparent.count("-") == 3:
                        ids.add(env.traceparent.split("-")[1])
                    if env.correlation_id:
                        sagas.add(env.correlation_id)
            for saga in sorted(sagas):
                try:
                    subject = store.subject("Saga", None, saga)
                except ValueError:
                    continue
                async for records in store.read_raw(subject):
                    for rec in records:
                        tp = decode_raw(rec.data, rec.seq).traceparent
                        if tp.count("-") == 3:
                            ids.add(tp.split("-")[1])
        except (StoreUnavailable, DecodeError, nats.errors.Error):
            pass
        finally:
            await store.close()
        return ids

    return asyncio.run(collect())


def pod_traces(
    base: str, settings: Settings, namespace: str, name: str, use_log: bool
) -> list[dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    try:
        subject = aggregate_subject("Pod", namespace, name, settings.root)
    except ValueError as exc:
        raise UserError(f"pod {namespace}/{name}: {exc}") from None
    queries = [
        [("tag", f"k8s.pod.name:{name}"), ("tag", f"k8s.namespace.name:{namespace}")],
        [("tag", f"messaging.destination.name:{subject}")],
    ]
    for q in queries:
        for t in _get(base, "/api/traces", [*q, ("limit", "100")]).get("data") or []:
            found[t["traceID"]] = t
    if use_log:
        for tid in sorted(trace_ids_from_log(settings, namespace, name) - set(found)):
            for t in _get(base, f"/api/traces/{tid}").get("data") or []:
                found[t["traceID"]] = t
    return sorted(found.values(), key=lambda t: min((s["startTime"] for s in t["spans"]), default=0))


def _tag(span: dict[str, Any], key: str) -> Any:
    return next((t["value"] for t in span.get("tags", []) if t["key"] == key), None)


def waterfall(trace: dict[str, Any]) -> list[str]:
    """A trace as text: one line per span, indented under its parent, with offset, duration, service."""
    spans = trace["spans"]
    if not spans:
        return [f"trace {trace['traceID']}: no spans"]
    ids = {s["spanID"] for s in spans}
    children: dict[str, list[dict[str, Any]]] = {}
    roots: list[dict[str, Any]] = []
    for s in sorted(spans, key=lambda x: (x["startTime"], x["spanID"])):
        parent = next((r["spanID"] for r in s.get("references", []) if r.get("refType") == "CHILD_OF"), "")
        (children.setdefault(parent, []) if parent in ids else roots).append(s)
    t0 = min(s["startTime"] for s in spans)
    t1 = max(s["startTime"] + s["duration"] for s in spans)
    total = max(t1 - t0, 1)
    procs = trace.get("processes", {})
    services = sorted({procs.get(s["processID"], {}).get("serviceName", "?") for s in spans})
    errors = sum(1 for s in spans if _tag(s, "error") is True)
    head = (
        f"trace {trace['traceID']}  {len(spans)} spans  {len(services)} services ({', '.join(services)})  "
        f"{total / 1000:.3f} ms" + (f"  {errors} error(s)" if errors else "")
    )
    lines = [head, f"  {'OFFSET ms':>10}  {'DURATION ms':>11}  {'SERVICE':<20}  {'':<{BAR}}  OPERATION"]

    def walk(s: dict[str, Any], depth: int) -> None:
        start = (s["startTime"] - t0) / total
        width = max(1, round(s["duration"] / total * BAR))
        left = min(BAR - 1, int(start * BAR))
        bar = " " * left + "#" * min(width, BAR - left)
        service = procs.get(s["processID"], {}).get("serviceName", "?")
        kind = _tag(s, "span.kind")
        name = "  " * depth + s["operationName"] + (f" [{kind}]" if kind else "")
        line = (
            f"  {(s['startTime'] - t0) / 1000:>10.3f}  {s['duration'] / 1000:>11.3f}  {service:<20.20}  "
            f"{bar:<{BAR}}  {name}"
        )
        if _tag(s, "error") is True:
            line += f"  ERROR: {_tag(s, 'otel.status_description') or 'failed'}"
        lines.append(line)
        for c in children.get(s["spanID"], []):
            walk(c, depth + 1)

    for r in roots:
        walk(r, 0)
    return lines


def _base(args: argparse.Namespace) -> str:
    return str(args.query_url or os.environ.get("DRAFLOW_TRACE_QUERY_URL") or DEFAULT_QUERY_URL)


def run(args: argparse.Namespace) -> int:
    base = _base(args)
    settings = settings_with_url(args.nats_url)
    traces = pod_traces(base, settings, args.namespace, args.name, not args.no_log)
    if not traces:
        raise UserError(f"no traces for pod {args.namespace}/{args.name} in {base}")
    return _print(traces, args.output)


def run_id(args: argparse.Namespace) -> int:
    tid = args.trace_id.lower()
    if len(tid) != 32 or any(c not in "0123456789abcdef" for c in tid):
        raise UserError(f"trace id {args.trace_id!r}: expected 32 hex digits")
    traces = _get(_base(args), f"/api/traces/{tid}").get("data") or []
    if not traces:
        raise UserError(f"trace {tid}: not found in {_base(args)}")
    return _print(traces, args.output)


def _print(traces: list[dict[str, Any]], output: str) -> int:
    if output == "jaeger":
        json.dump({"data": traces}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    out: list[str] = []
    for t in traces:
        out += [*waterfall(t), ""]
    print("\n".join(out).rstrip())
    return 0
