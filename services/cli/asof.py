"""Read-only state at a point of the log: ``--as-of-seq N`` / ``--as-of-time T`` for ``get``.

The log is read straight from JetStream (no apiserver: the past is not served) from sequence 1 up
to the bound and folded with the same reducers the apiserver uses (``draflow.projections.objects``), so what
is printed is exactly what the apiserver held at that sequence.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
import nats.errors
from nats.js.errors import NotFoundError

from draflow.events.api.registry import resource_types
from draflow.events.codec import DecodeError, decode, decode_raw
from draflow.events.objects import EVENT_KIND
from draflow.events.subjects import parse_subject
from draflow.infra.eventstore import EventStore
from draflow.projections.objects import ObjectIndex
from draflow.services.cli.common import settings_from
from draflow.services.cli.main import UserError

__all__ = [
    "add_as_of_args",
    "as_of_requested",
    "bound_time",
    "fold_objects",
    "open_log",
    "parse_time",
    "resolve_bound",
]


def add_as_of_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--as-of-seq", metavar="N", help="state after stream sequence N (read from the log)")
    p.add_argument("--as-of-time", metavar="T", help="state at RFC3339 time T (read from the log)")


def as_of_requested(args: argparse.Namespace) -> bool:
    return getattr(args, "as_of_seq", None) is not None or getattr(args, "as_of_time", None) is not None


def parse_seq(text: str) -> int:
    try:
        seq = int(text)
    except ValueError:
        raise UserError(f"--as-of-seq: not a sequence number: {text!r}") from None
    if seq < 1:
        raise UserError(f"--as-of-seq: must be >= 1, got {seq}")
    return seq


def parse_time(text: str) -> datetime.datetime:
    """RFC3339 with a zone (``2026-11-22T03:05:38.383Z``, ``...+01:00``)."""
    try:
        t = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UserError(f"--as-of-time: not an RFC3339 time: {text!r}") from None
    if t.tzinfo is None:
        raise UserError(f"--as-of-time: {text!r} has no time zone (add Z or +hh:mm)")
    return t


@asynccontextmanager
async def open_log(args: argparse.Namespace) -> AsyncIterator[EventStore]:
    """The event store, read-only (never creates the stream); one-line errors when it is missing."""
    settings = settings_from(args)
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
        yield store
    finally:
        await store.close()


def _ms(t: datetime.datetime) -> datetime.datetime:
    """Event times to the millisecond, as ``draflow log`` prints them, so a printed time selects
    its own event."""
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


async def resolve_bound(store: EventStore, args: argparse.Namespace) -> int:
    """The last stream sequence to fold (0: before the first event)."""
    if args.as_of_seq is not None and args.as_of_time is not None:
        raise UserError("--as-of-seq and --as-of-time cannot be used together")
    last = await store.stream_last_seq()
    if args.as_of_seq is not None:
        seq = parse_seq(args.as_of_seq)
        if seq > last:
            raise UserError(f"--as-of-seq: {seq} is past the end of the log (last sequence {last})")
        return seq
    when = parse_time(args.as_of_time)
    bound = 0
    async for records in store.read_raw(None, 1, last):
        for rec in records:
            try:
                t = decode_raw(rec.data, rec.seq).time
            except DecodeError:
                continue
            if _ms(t) <= when:
                bound = rec.seq
    return bound


async def bound_time(store: EventStore, args: argparse.Namespace, seq: int) -> datetime.datetime | None:
    """The time an as-of view is at, which its ages count from: ``--as-of-time`` itself, or the
    time of event ``seq`` for ``--as-of-seq`` (None before the first event)."""
    if args.as_of_time is not None:
        return parse_time(args.as_of_time)
    if seq < 1:
        return None
    async for records in store.read_raw(None, seq, seq):
        for rec in records:
            try:
                return decode_raw(rec.data, rec.seq).time
            except DecodeError:
                return None
    return None


async def fold_objects(store: EventStore, to_seq: int) -> ObjectIndex:
    """Every API object as the apiserver held it after ``to_seq`` (same fold, same reducers)."""
    index = ObjectIndex()
    if to_seq < 1:
        return index
    kinds = frozenset(rt.kind for rt in resource_types()) | {EVENT_KIND}
    async for records in store.read_raw(None, 1, to_seq):
        for rec in records:
            try:
                kind, ns, name = parse_subject(rec.subject, store.root)
            except ValueError:
                continue
            if kind not in kinds:
                continue  # sagas and other aggregates share the stream
            try:
                env = decode(rec.data, rec.seq)
            except (DecodeError, msgspec.MsgspecError):
                index.touch(kind, ns or "", name, rec.seq)
            else:
                index.apply_envelope(kind, ns or "", name, env)
    return index
