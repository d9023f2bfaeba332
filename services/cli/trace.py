"""``draflow trace pod NAME [-n NS]``: a pod's traces as a text waterfall or as a Jaeger JSON file.

Spans come from the trace store's query API (``services/cli/trace_store.py``: the ``otlp`` service
by default, or a real Jaeger). A pod's traces are found two ways and merged:

* by attributes: spans tagged ``k8s.pod.name``/``k8s.namespace.name``, and spans of appends to the
  pod's aggregate subject (``messaging.destination.name``);
* through the log (when NATS answers): the trace ids in the ``traceparent`` of every event on the
  pod's subject and of every saga the pod's events are correlated with.

Services export spans in batches (every 5 s by default), so right after an apply the store may not
have them yet: every event in the log names the span that appended it (its ``traceparent``), so
while the log names traces or spans the store lacks, or a span's parent is not there yet, the
command waits for them (``--wait``, by default a batch interval and a margin). When they still have
not come it prints what it has, headed ``INCOMPLETE``, and says on stderr how many are missing.
When nothing is found, the error says why: nothing in the log about that pod, events without trace
context (the services were not tracing), or spans that never reached the store being read (they
export somewhere else).

``-o jaeger`` prints ``{"data": [{"traceID", "spans", "processes"}]}``, which Jaeger's UI opens
("Upload JSON").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import nats.errors
from nats.js.errors import NotFoundError

from draflow.events.codec import DecodeError, decode_raw
from draflow.events.subjects import aggregate_subject
from draflow.infra.config import Settings
from draflow.infra.errors import StoreUnavailable
from draflow.services.cli.connection import add_nats_url_arg, settings_for
from draflow.services.cli.main import UserError
from draflow.services.cli.trace_store import QUERY_URL_VAR, TraceStore

__all__ = ["LogTraces", "log_traces", "register", "trace_ids_from_log", "waterfall"]

BAR = 24
POLL_S = 0.5


def batch_delay_s() -> float:
    """How long a service may hold a finished span before exporting it (the SDK's batch delay)."""
    raw = os.environ.get("OTEL_BSP_SCHEDULE_DELAY") or "5000"
    try:
        return max(0.0, float(raw) / 1000)
    except ValueError:
        return 5.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="show traces (text waterfall or Jaeger JSON)")
    what = p.add_subparsers(dest="what", metavar="WHAT", required=True)
    pod = what.add_parser("pod", help="the traces of one pod's flow")
    pod.add_argument("name", help="pod name")
    pod.add_argument("-n", "--namespace", default="default", help="namespace (default: default)")
    one = what.add_parser("id", help="one trace by its id (e.g. from an event's traceparent)")
    one.add_argument("trace_id", help="32 hex digits")
    for q in (pod, one):
        q.add_argument("-o", "--output", choices=("text", "jaeger"), default="text", help="output format")
        q.add_argument(
            "--query-url",
            default=None,
            help=f"trace store query API: the otlp service or a Jaeger query service (default: "
            f"${QUERY_URL_VAR}, else derived from $OTEL_EXPORTER_OTLP_ENDPOINT, else "
            "http://127.0.0.1:4318 plus $DRAFLOW_PORT_OFFSET)",
        )
        q.add_argument(
            "--wait",
            type=float,
            default=None,
            metavar="SECONDS",
            help="how long to wait for spans still being exported (default: the batch delay, "
            "$OTEL_BSP_SCHEDULE_DELAY, plus 2 s; 0: do not wait)",
        )
    pod.add_argument("--no-log", action="store_true", help="do not look in the event log for trace ids")
    add_nats_url_arg(pod)
    pod.set_defaults(func=run)
    one.set_defaults(func=run_id)


@dataclass
class LogTraces:
    """What the log says about an object's traces."""

    events: int = 0  # the object's own events
    ids: set[str] = field(default_factory=set)  # trace ids of its events and of its sagas' events
    # trace id -> the span ids those events name (the spans that appended them): all must be in
    # the store before the trace is complete
    spans: dict[str, set[str]] = field(default_factory=dict)

    def add(self, traceparent: str) -> None:
        parts = traceparent.split("-")
        if len(parts) == 4:
            self.ids.add(parts[1])
            self.spans.setdefault(parts[1], set()).add(parts[2])


def log_traces(settings: Settings, namespace: str, name: str, kind: str = "Pod") -> LogTraces | None:
    """Trace ids in the traceparents of the object's (a pod's) events and of the sagas they belong
    to; ``None`` when the log cannot be read (NATS does not answer)."""

    async def collect() -> LogTraces | None:
        from draflow.infra.eventstore import EventStore

        try:
            store = await EventStore.open(settings, "draflow-cli", ensure=False, connect_timeout_s=2.0)
        except (OSError, TimeoutError, nats.errors.Error):
            return None
        found = LogTraces()
        sagas: set[str] = set()
        try:
            await store.js.stream_info(settings.stream)
        except NotFoundError:  # no service has run on this stream yet: an empty log
            await store.close()
            return found
        except (TimeoutError, nats.errors.Error):
            await store.close()
            return None
        try:
            async for records in store.read_raw(store.subject(kind, namespace, name)):
                for rec in records:
                    found.events += 1
                    try:
                        env = decode_raw(rec.data, rec.seq)
                    except DecodeError:
                        continue
                    found.add(env.traceparent)
                    if env.correlation_id:
                        sagas.add(env.correlation_id)
            for saga in sorted(sagas):
                try:
                    subject = store.subject("Saga", None, saga)
                except ValueError:
                    continue
                async for records in store.read_raw(subject):
                    for rec in records:
                        found.add(decode_raw(rec.data, rec.seq).traceparent)
        except (StoreUnavailable, DecodeError, nats.errors.Error):
            return None if not found.events else found
        finally:
            await store.close()
        return found

    return asyncio.run(collect())


def trace_ids_from_log(settings: Settings, namespace: str, name: str, kind: str = "Pod") -> set[str]:
    """The trace ids ``log_traces`` finds (none when the log cannot be read)."""
    found = log_traces(settings, namespace, name, kind)
    return found.ids if found is not None else set()


def pod_traces(
    store: TraceStore, settings: Settings, namespace: str, name: str, log_ids: set[str]
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
        for t in store.search([*q, ("limit", "100")]):
            found[t["traceID"]] = t
    for tid in sorted(log_ids - set(found)):
        for t in store.trace(tid):
            found[t["traceID"]] = t
    return sorted(found.values(), key=lambda t: min((s["startTime"] for s in t["spans"]), default=0))


def orphans(traces: list[dict[str, Any]]) -> int:
    """Spans whose parent is not (yet) in their trace: the services that recorded the parents have
    not exported them, so the trace is still incomplete."""
    count = 0
    for t in traces:
        ids = {s["spanID"] for s in t["spans"]}
        for s in t["spans"]:
            parents = [r["spanID"] for r in s.get("references") or [] if r.get("refType") == "CHILD_OF"]
            count += any(p not in ids for p in parents)
    return count


def unexported(traces: list[dict[str, Any]], logged: LogTraces | None) -> int:
    """Spans the log's events name (each event carries the span that appended it) that the store
    does not have yet: the services that recorded them have not exported them (yet)."""
    if logged is None:
        return 0
    have = {(t["traceID"], s["spanID"]) for t in traces for s in t["spans"]}
    return sum(1 for tid, ids in logged.spans.items() for sid in ids if (tid, sid) not in have)


def _newest_end_us(traces: list[dict[str, Any]]) -> int:
    return max((s["startTime"] + s["duration"] for t in traces for s in t["spans"]), default=0)


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
        refs = s.get("references") or []
        follows = sorted({r["traceID"] for r in refs if r.get("refType") == "FOLLOWS_FROM"})
        if follows:
            line += f"  (follows trace {', '.join(follows)})"
        if result := _tag(s, "draflow.scheduling.result"):
            line += f"  {result}: {_tag(s, 'draflow.scheduling.message') or ''}".rstrip()
        lines.append(line)
        for c in children.get(s["spanID"], []):
            walk(c, depth + 1)

    for r in roots:
        walk(r, 0)
    return lines


def _wait_s(args: argparse.Namespace) -> float:
    return batch_delay_s() + 2.0 if args.wait is None else max(0.0, args.wait)


def _notes(traces: list[dict[str, Any]], missing: int = 0) -> None:
    """On stderr: what the printed traces may still lack (spans not exported yet)."""
    if missing:
        print(
            f"note: incomplete: {missing} span(s) named by the pod's events in the log are not in the trace "
            f"store yet; services export spans every {batch_delay_s():g}s (OTEL_BSP_SCHEDULE_DELAY), so "
            "they are still being exported (or their service stopped before it could): run again for "
            "the rest",
            file=sys.stderr,
        )
    if n := orphans(traces):
        print(
            f"note: {n} span(s) have a parent that is not in the store: a service has not exported it (yet), "
            "or exports elsewhere",
            file=sys.stderr,
        )
    age = time.time() - _newest_end_us(traces) / 1e6
    if traces and age < batch_delay_s():
        print(
            f"note: the newest span ended {max(age, 0):.1f}s ago; services export spans every "
            f"{batch_delay_s():g}s (OTEL_BSP_SCHEDULE_DELAY), so the trace may still grow: run again for "
            "the rest",
            file=sys.stderr,
        )


def run(args: argparse.Namespace) -> int:
    store = TraceStore.from_args(args.query_url)
    settings = settings_for(args.nats_url)
    logged = None if args.no_log else log_traces(settings, args.namespace, args.name)
    log_ids = logged.ids if logged is not None else set()
    deadline = time.monotonic() + _wait_s(args)
    while True:
        traces = pod_traces(store, settings, args.namespace, args.name, log_ids)
        missing = log_ids - {t["traceID"] for t in traces}
        pending = unexported(traces, logged)
        if (not missing and not pending and not orphans(traces)) or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)  # the services export in batches: poll the store until they did
    if not traces:
        raise UserError(_nothing_found(args, store, settings, logged, log_ids))
    _notes(traces, pending)
    return _print(traces, args.output, pending)


def _nothing_found(
    args: argparse.Namespace,
    store: TraceStore,
    settings: Settings,
    logged: LogTraces | None,
    log_ids: set[str],
) -> str:
    pod = f"{args.namespace}/{args.name}"
    head = f"no traces for pod {pod} in {store.where}"
    if logged is not None and not logged.events:
        return (
            f"no traces for pod {pod}: the pod has no events in the log at {settings.nats_url} (stream "
            f"{settings.stream}); another namespace, or another system (--nats-url, DRAFLOW_NATS_URL, "
            "DRAFLOW_PORT_OFFSET)?"
        )
    if logged is not None and not log_ids:
        return (
            f"{head}: the pod's {logged.events} events in the log carry no trace context, so the services "
            "were not tracing when it was applied (OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true in "
            "their environment?)"
        )
    waited = f"{_wait_s(args):g}s"
    if log_ids:
        ids = ", ".join(sorted(log_ids)[:3]) + (", …" if len(log_ids) > 3 else "")
        return (
            f"{head} after waiting {waited}: the pod's events name trace(s) {ids}, but the store has no "
            f"span of them. Spans are exported in batches (every {batch_delay_s():g}s): retry in a few "
            "seconds. If they still do not come, the services export elsewhere: their "
            f"OTEL_EXPORTER_OTLP_ENDPOINT and this command's {QUERY_URL_VAR} must name the same trace store"
        )
    why = "--no-log" if args.no_log else f"no answer from the log at {settings.nats_url}"
    return (
        f"{head} ({why}): if the pod was applied in the last seconds, its spans may still be exporting "
        f"(every {batch_delay_s():g}s): retry in a few seconds"
    )


def run_id(args: argparse.Namespace) -> int:
    tid = args.trace_id.lower()
    if len(tid) != 32 or any(c not in "0123456789abcdef" for c in tid):
        raise UserError(f"trace id {args.trace_id!r}: expected 32 hex digits")
    store = TraceStore.from_args(args.query_url)
    deadline = time.monotonic() + _wait_s(args)
    while (not (traces := store.trace(tid)) or orphans(traces)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    if not traces:
        raise UserError(
            f"trace {tid}: not found in {store.where} (waited {_wait_s(args):g}s; spans are exported every "
            f"{batch_delay_s():g}s, and only if the services export to this store)"
        )
    _notes(traces)
    return _print(traces, args.output)


def _print(traces: list[dict[str, Any]], output: str, pending: int = 0) -> int:
    if output == "jaeger":
        json.dump({"data": traces}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    out: list[str] = []
    if pending:
        out.append(f"INCOMPLETE: {pending} span(s) the log names are still being exported (see the note)")
    for t in traces:
        out += [*waterfall(t), ""]
    print("\n".join(out).rstrip())
    return 0
