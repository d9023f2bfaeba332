"""``draflow export`` / ``draflow import``: the event log as a portable JSON Lines file.

A user attaches the file to a bug report; a developer imports it into an empty system and replays
it (``draflow log``, projections, sagas) exactly as it happened, and follows its traces
(``draflow trace``): the export carries every trace its events name (``--without-traces`` leaves
them out; ``draflow.services.cli.export_traces``), the import sends them to the receiving
system's trace receiver. The first line is a header
(``{"draflow_export": 1, "stream", "root", "from_seq", "to_seq", ...}``), then one line per stored
message: its original stream ``seq``, ``subject``, server ``time``, its NATS ``headers`` (without
the ones the server adds on read) and the stored ``envelope`` byte for byte; with spans (format 2,
``traces`` in the header), one ``{"trace": ...}`` line per trace follows, in Jaeger's JSON shape.

Import re-appends in order, one message at a time, with the original ``Nats-Msg-Id`` and
``Nats-Expected-Last-Subject-Sequence`` (the subject's last sequence *in the target*), so nothing
is interleaved or doubled. It refuses a stream holding anything but a prefix of the same log; a
stream holding such a prefix (an interrupted import) is resumed after it. Sequences stay the same
when the export started at sequence 1 of a gap-free stream; otherwise they are renumbered densely
(the order and every id are kept). A log exported under another subject root is rewritten to the
target's root (the envelope's ``subject`` too).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import codecs
import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

import msgspec
import nats.errors
from nats.js.errors import APIError, NotFoundError

from draflow.events.codec import DecodeError, decode_raw, encode
from draflow.infra import tracing
from draflow.infra.auth.authority import AuthorityError
from draflow.infra.auth.roles import ADMIN, CLI
from draflow.infra.config import Settings
from draflow.infra.errors import StoreUnavailable
from draflow.infra.eventstore import (
    ERR_WRONG_LAST_SEQUENCE,
    HDR_EXPECTED_LAST_SUBJECT_SEQ,
    HDR_MSG_ID,
    EventStore,
)
from draflow.infra.reader import RawRecord
from draflow.services.cli.connection import add_nats_url_arg, settings_for
from draflow.services.cli.export_traces import fetch_traces, send_traces, trace_ids
from draflow.services.cli.main import UserError
from draflow.services.cli.trace import batch_delay_s
from draflow.services.cli.trace_store import QUERY_URL_VAR, TraceStore

__all__ = [
    "ExportHeader",
    "ExportedMessage",
    "connect_store",
    "parse_headers",
    "read_export",
    "read_export_traces",
    "register",
]

FORMAT_VERSION = 1  # events only
TRACES_FORMAT_VERSION = 2  # events, then one ``{"trace": <Jaeger JSON trace>}`` line per trace
READABLE = (FORMAT_VERSION, TRACES_FORMAT_VERSION)

# headers the server adds to a stored message when it is read back (or that only steer a publish)
_SERVER_HEADERS = (
    "Nats-Subject",
    "Nats-Sequence",
    "Nats-Time-Stamp",
    "Nats-Stream",
    "Nats-Last-Sequence",
    "Nats-Num-Pending",
    "Nats-Expected-",
    "Nats-Batch-",
    "Nats-TTL",
    "Nats-Marker-Reason",
)


class ExportHeader(msgspec.Struct, kw_only=True):
    draflow_export: int = FORMAT_VERSION
    stream: str
    root: str
    from_seq: int
    to_seq: int
    count: int = 0
    traces: int = 0  # trace lines after the messages (format 2)


class ExportedMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    seq: int
    subject: str
    time: str = ""
    headers: dict[str, str] = {}
    envelope: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET  # the stored JSON, verbatim
    data_b64: str = ""  # instead of envelope, for a stored message that is not JSON (kept as is)

    def payload(self) -> bytes:
        if isinstance(self.envelope, msgspec.Raw):
            return bytes(self.envelope)
        return base64.b64decode(self.data_b64)


_enc = msgspec.json.Encoder()
_header_dec = msgspec.json.Decoder(ExportHeader)
_msg_dec = msgspec.json.Decoder(ExportedMessage)
_any = msgspec.json.Decoder()


def parse_headers(block: bytes | None) -> dict[str, str]:
    """A raw NATS header block as a dict (first value wins), without server-added headers."""
    out: dict[str, str] = {}
    if not block:
        return out
    for line in block.decode().split("\r\n")[1:]:
        if ":" not in line:
            continue
        key, value = line.split(":", 1)
        key = key.strip()
        if key and not key.startswith(_SERVER_HEADERS) and key not in out:
            out[key] = value.strip()
    return out


def settings_with_url(url: str | None, role: str = CLI) -> Settings:
    return settings_for(url, role)


async def connect_store(settings: Settings, *, ensure: bool = False) -> EventStore:
    """Connect for a CLI command, with one-line errors."""
    try:
        store = await EventStore.open(settings, "draflow-cli", ensure=False, connect_timeout_s=3.0)
    except AuthorityError as exc:
        raise UserError(str(exc)) from None
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        reason = str(exc) or type(exc).__name__
        raise UserError(f"cannot connect to NATS at {settings.nats_url}: {reason}") from None
    if ensure:
        try:
            await store.ensure_stream()
        except APIError as exc:
            await store.close()
            raise UserError(f"cannot create stream {settings.stream}: {exc.description}") from None
    return store


async def require_stream(store: EventStore, stream: str) -> Any:
    try:
        return await store.js.stream_info(stream)
    except NotFoundError:
        raise UserError(f"no event log yet: stream {stream} does not exist (start a service first)") from None


def export_line(rec: RawRecord) -> bytes:
    t = rec.time
    when = t.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if t is not None else ""
    msg = ExportedMessage(seq=rec.seq, subject=rec.subject, time=when, headers=parse_headers(rec.headers))
    try:
        _any.decode(rec.data)
        msg.envelope = msgspec.Raw(rec.data)
    except msgspec.DecodeError:  # garbage someone published: export it, so a replay sees it too
        msg.data_b64 = base64.b64encode(rec.data).decode()
    return _enc.encode(msg)


async def export_log(
    settings: Settings,
    out: TextIO,
    from_seq: int,
    to_seq: int | None,
    traces_from: TraceStore | None = None,
    notes: TextIO | None = None,
    written_traces: list[dict[str, Any]] | None = None,
) -> int:
    """Write the export; with ``traces_from``, also every trace the exported events name (what the
    store has of them; ``notes`` hears what was missing or unreachable; ``written_traces`` gets
    the traces written).

    Bounded memory: the lines go to a temporary file as they are read (the header, which comes
    first, needs their count), then are copied to ``out`` in blocks; only the trace ids are kept."""
    store = await connect_store(settings)
    count = 0
    ids: dict[str, None] = {}
    with tempfile.TemporaryFile() as spool:
        try:
            info = await require_stream(store, settings.stream)
            last = int(info.state.last_seq)
            end = min(to_seq, last) if to_seq is not None else last
            header = ExportHeader(stream=settings.stream, root=settings.root, from_seq=from_seq, to_seq=end)
            if end >= from_seq:
                async for records in store.read_raw(store.all_events, from_seq, end):
                    spool.write(b"".join(export_line(r) + b"\n" for r in records))
                    count += len(records)
                    if traces_from is not None:
                        ids.update(dict.fromkeys(trace_ids(r.data for r in records)))
        except StoreUnavailable as exc:
            raise UserError(f"reading the log failed: {exc}") from None
        finally:
            await store.close()
        traces = _traces_of(traces_from, list(ids), notes) if traces_from is not None else []
        if written_traces is not None:
            written_traces.extend(traces)  # what the caller reports, without reading the file again
        header.count = count
        header.traces = len(traces)
        if traces:
            header.draflow_export = TRACES_FORMAT_VERSION
        head = msgspec.to_builtins(header)
        if not header.traces:  # format 1 stays exactly as it was
            del head["traces"]
        out.write(_enc.encode(head).decode() + "\n")
        spool.seek(0)
        text = codecs.getincrementaldecoder("utf-8")()  # a block may end inside a character
        while block := spool.read(1 << 20):
            out.write(text.decode(block))
        out.write(text.decode(b"", final=True))
    for t in traces:
        out.write(json.dumps({"trace": t}, separators=(",", ":")) + "\n")
    out.flush()
    return count


def _traces_of(store: TraceStore, ids: list[str], notes: TextIO | None) -> list[dict[str, Any]]:
    if not ids:
        return []
    try:
        traces, missing = fetch_traces(store, ids, wait_s=batch_delay_s() + 2.0)
    except UserError as exc:
        if notes is not None:
            print(f"note: the export has no spans: {exc}", file=notes)
        return []
    if missing and notes is not None:
        print(
            f"note: {missing} of the {len(ids)} traces the events name are not in {store.where} "
            "(pruned, never exported, or still being exported)",
            file=notes,
        )
    return traces


def read_export(path: Path) -> tuple[ExportHeader, list[ExportedMessage]]:
    """Parse an export file's header and messages (see ``read_export_traces`` for its spans)."""
    header, msgs, _ = read_export_traces(path)
    return header, msgs


def read_export_traces(path: Path) -> tuple[ExportHeader, list[ExportedMessage], list[dict[str, Any]]]:
    """Parse an export file; a bad line is a clear error naming the file and line."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror or exc}") from None
    if not lines:
        raise UserError(f"{path}: empty file (expected a draflow export header line)")
    try:
        header = _header_dec.decode(lines[0])
    except msgspec.DecodeError as exc:
        raise UserError(f"{path}:1: not a draflow export header: {exc}") from None
    if header.draflow_export not in READABLE:
        fmt = header.draflow_export
        readable = " and ".join(str(v) for v in READABLE)
        raise UserError(f"{path}:1: export format {fmt} (this draflow reads {readable})")
    msgs: list[ExportedMessage] = []
    traces: list[dict[str, Any]] = []
    for i, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        if line.startswith(b'{"trace":'):
            try:
                trace = json.loads(line)["trace"]
            except (ValueError, KeyError) as exc:
                raise UserError(f"{path}:{i}: not an exported trace: {exc}") from None
            if not isinstance(trace, dict) or not isinstance(trace.get("spans"), list):
                raise UserError(f"{path}:{i}: not an exported trace: expected a Jaeger JSON trace object")
            traces.append(trace)
            continue
        try:
            msgs.append(_msg_dec.decode(line))
        except msgspec.DecodeError as exc:
            raise UserError(f"{path}:{i}: not an exported message: {exc}") from None
        if msgs[-1].subject.split(".", 2)[1:2] != ["ev"]:
            raise UserError(f"{path}:{i}: subject {msgs[-1].subject!r} is not an event subject (<root>.ev.>)")
    if any(b.seq <= a.seq for a, b in itertools.pairwise(msgs)):
        raise UserError(f"{path}: messages are not in stream order")
    return header, msgs, traces


def rerooted(msg: ExportedMessage, old_root: str, new_root: str) -> tuple[str, bytes]:
    """Subject and payload for the target stream (the same bytes when the roots agree)."""
    payload = msg.payload()
    if old_root == new_root:
        return msg.subject, payload
    subject = new_root + msg.subject[len(old_root) :]
    try:
        env = decode_raw(payload)
    except DecodeError:
        return subject, payload  # not an envelope: nothing inside to re-root
    return subject, encode(msgspec.structs.replace(env, subject=new_root + env.subject[len(old_root) :]))


async def _existing_ids(store: EventStore) -> list[tuple[int, str, str]]:
    found: list[tuple[int, str, str]] = []
    async for records in store.read_raw(store.all_events):
        found.extend((r.seq, r.subject, r.header(HDR_MSG_ID) or "") for r in records)
    return found


async def import_log(settings: Settings, path: Path, out: TextIO) -> tuple[int, int]:
    """Append the exported messages to an empty (or partially imported) stream: (skipped, appended)."""
    header, msgs = read_export(path)
    store = await connect_store(settings, ensure=True)
    try:
        existing = await _existing_ids(store)
        last_on: dict[str, int] = {}
        for i, (seq, subject, msg_id) in enumerate(existing):
            want = msgs[i] if i < len(msgs) else None
            want_subject = rerooted(want, header.root, settings.root)[0] if want else ""
            if want is None or want.headers.get(HDR_MSG_ID, "") != msg_id or want_subject != subject:
                raise UserError(
                    f"stream {settings.stream} is not empty ({len(existing)} events) and does not hold "
                    f"the start of {path} (message {i + 1} differs): import only into an empty system"
                )
            last_on[subject] = seq
        if existing:
            print(f"resuming: the first {len(existing)} events of {path} are already imported", file=out)
        appended = 0
        for msg in msgs[len(existing) :]:
            subject, payload = rerooted(msg, header.root, settings.root)
            headers = dict(msg.headers)
            headers[HDR_EXPECTED_LAST_SUBJECT_SEQ] = str(last_on.get(subject, 0))
            try:
                ack = await store.js.publish(subject, payload, timeout=10.0, headers=headers)
            except APIError as exc:
                if exc.err_code == ERR_WRONG_LAST_SEQUENCE:
                    msg_ = f"{subject}: changed by someone else during the import (seq {msg.seq})"
                    raise UserError(msg_) from None
                raise UserError(f"import of seq {msg.seq} ({subject}) refused: {exc.description}") from None
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
                raise UserError(f"import stopped at seq {msg.seq}: {exc!r}; run it again to resume") from None
            last_on[subject] = ack.seq
            appended += 1
        return len(existing), appended
    finally:
        await store.close()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write the event log as JSON Lines (for a bug report)")
    p.add_argument("--from-seq", type=int, default=1, metavar="N", help="first stream sequence")
    p.add_argument("--to-seq", type=int, default=None, metavar="N", help="last stream sequence")
    p.add_argument("-o", "--output", default="-", metavar="FILE", help="file to write (default: stdout)")
    p.add_argument(
        "--without-traces",
        action="store_true",
        help="leave out the spans (by default every trace an exported event names is read from the trace "
        "store and written after the events)",
    )
    p.add_argument(
        "--query-url",
        default=None,
        help=f"trace store query API (default: ${QUERY_URL_VAR}, else derived from the OTLP endpoint)",
    )
    add_nats_url_arg(p)
    p.set_defaults(func=run_export)
    q = sub.add_parser("import", help="append an exported log to an empty system (resumable)")
    q.add_argument("file", type=Path, help="a file written by draflow export")
    q.add_argument(
        "--without-traces",
        action="store_true",
        help="do not send the file's spans to this system's trace receiver (OTEL_EXPORTER_OTLP_ENDPOINT)",
    )
    add_nats_url_arg(q)
    q.set_defaults(func=run_import)


def run_export(args: argparse.Namespace) -> int:
    if args.from_seq < 1:
        raise UserError(f"--from-seq: must be >= 1, got {args.from_seq}")
    if args.to_seq is not None and args.to_seq < args.from_seq:
        raise UserError(f"--to-seq: must be >= --from-seq ({args.from_seq}), got {args.to_seq}")
    settings = settings_with_url(args.nats_url)
    spans = None if args.without_traces else TraceStore.from_args(args.query_url)
    traces: list[dict[str, Any]] = []
    if args.output == "-":
        n = asyncio.run(export_log(settings, sys.stdout, args.from_seq, args.to_seq, spans, sys.stderr))
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            n = asyncio.run(export_log(settings, f, args.from_seq, args.to_seq, spans, sys.stderr, traces))
    what = f"exported {n} events"
    if traces:
        what += f" and {len(traces)} traces ({sum(len(t['spans']) for t in traces)} spans)"
    print(what, file=sys.stderr)
    return 0


def run_import(args: argparse.Namespace) -> int:
    _, _, traces = read_export_traces(args.file)
    with tracing.suppressed():  # an imported run is history: no live-looking spans
        skipped, appended = asyncio.run(
            import_log(settings_with_url(args.nats_url, ADMIN), args.file, sys.stderr)
        )
    print(f"imported {appended} events" + (f" ({skipped} were already there)" if skipped else ""))
    if traces and not args.without_traces:
        sys.stdout.flush()
        count, url = send_traces(traces)
        print(f"imported {count} spans of {len(traces)} traces into the trace receiver at {url}")
    return 0
