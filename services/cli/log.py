"""``draflow log``: the raw event log, one line per event.

Reads the stream directly (no apiserver needed) and never changes it. Columns: stream sequence,
event time, subject, event type, actor, correlation id. ``-o json`` prints each stored envelope
as one JSON object per line, with its ``seq``. ``--subject`` takes a NATS subject filter, either
full (``draflow.ev.ResourceClaim.default.>``) or relative to the events prefix
(``ResourceClaim.default.>``). ``-f`` keeps printing new events until Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
from typing import TextIO

import msgspec
import nats.errors
from nats.js.errors import NotFoundError

from draflow.events.codec import DecodeError, decode_raw
from draflow.infra.errors import StoreUnavailable
from draflow.infra.eventstore import EventStore
from draflow.infra.reader import RawRecord
from draflow.services.cli.connection import add_nats_url_arg, settings_for
from draflow.services.cli.main import UserError

__all__ = ["format_line", "register", "run"]

_json = msgspec.json.Encoder()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("log", help="print the raw event log (one line per event)")
    p.add_argument("--subject", default="", metavar="PATTERN", help="subject filter (NATS wildcards * and >)")
    p.add_argument("--from-seq", type=int, default=1, metavar="N", help="start at stream sequence N")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new events")
    p.add_argument("--no-headers", action="store_true", help="omit the column header")
    add_nats_url_arg(p)
    p.set_defaults(func=run)


def subject_filter(pattern: str, root: str) -> str:
    prefix = f"{root}.ev"
    if not pattern:
        return f"{prefix}.>"
    if pattern == prefix or pattern.startswith(prefix + "."):
        return pattern
    return f"{prefix}.{pattern}"


def _time(t: datetime.datetime | None) -> str:
    if t is None:
        return "-"
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


HEADER = f"{'SEQ':>8}  {'TIME':<24}  {'SUBJECT':<52}  {'TYPE':<30}  {'ACTOR':<18}  CORRELATION"


def format_line(rec: RawRecord) -> str:
    try:
        env = decode_raw(rec.data, rec.seq)
    except DecodeError:
        return f"{rec.seq:>8}  {_time(rec.time):<24}  {rec.subject:<52}  {'<undecodable>':<30}  {'-':<18}  -"
    return (
        f"{rec.seq:>8}  {_time(env.time):<24}  {env.subject:<52}  {env.type:<30}  "
        f"{env.actor or '-':<18}  {env.correlation_id or '-'}"
    )


def format_json(rec: RawRecord) -> bytes:
    try:
        return _json.encode(decode_raw(rec.data, rec.seq))
    except DecodeError as exc:
        return _json.encode({"seq": rec.seq, "subject": rec.subject, "error": str(exc)})


async def _print_log(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args.nats_url)
    try:
        store = await EventStore.open(settings, "draflow-cli", ensure=False, connect_timeout_s=3.0)
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        reason = str(exc) or type(exc).__name__
        raise UserError(f"cannot connect to NATS at {settings.nats_url}: {reason}") from None
    try:
        try:
            await store.js.stream_info(settings.stream)
        except NotFoundError:
            msg = f"no event log yet: stream {settings.stream} does not exist (start a service first)"
            raise UserError(msg) from None
        filt = subject_filter(args.subject, settings.root)
        if args.output == "text" and not args.no_headers:
            print(HEADER, file=out)
        seq = max(1, args.from_seq)
        while True:
            async for records in store.read_raw(filt, seq):
                if args.output == "json":
                    out.write("\n".join(format_json(r).decode() for r in records) + "\n")
                else:
                    out.write("\n".join(format_line(r) for r in records) + "\n")
                seq = records[-1].seq + 1
            out.flush()
            if not args.follow:
                return 0
            await asyncio.sleep(0.25)
    except StoreUnavailable as exc:
        raise UserError(f"reading the log failed: {exc}") from None
    finally:
        await store.close()


def run(args: argparse.Namespace) -> int:
    if args.from_seq < 1:
        raise UserError(f"--from-seq: must be >= 1, got {args.from_seq}")
    try:
        return asyncio.run(_print_log(args, sys.stdout))
    except BrokenPipeError:  # `draflow log | head`
        return 0
