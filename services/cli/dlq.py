"""``draflow dlq list | show N | retry N | discard N``: the dead letters consumers set aside.

A consumer copies a poison event (its handler raised a permanent error, it could not be decoded,
or it failed ``max_deliver`` times) to ``<root>.dlq.<consumer>`` in the ``<stream>_DLQ`` stream,
with the reason, the consumer, the original subject and stream sequence and the delivery count in
headers. ``N`` below is the sequence in the DLQ stream (the first column of ``list``).

* ``retry N`` re-publishes the stored event, byte for byte (same envelope id), to its original
  subject. It is a new message at the end of the log, so every consumer of that subject sees it
  once more (handlers are idempotent: the envelope id identifies the fact). Its ``Nats-Msg-Id`` is
  ``dlq-retry:<N>`` (``dlq-retry:<N>:<k>`` for the k-th ``--again``), never the original id, which
  the stream would drop as a duplicate inside its window; a repeated retry is thus a no-op. No
  expected-sequence check is made: a retry re-delivers a fact, it does not decide anything new.
* ``discard N`` deletes the dead letter; if the DLQ stream denies deletes, a marker is recorded
  instead. Markers (``<root>.dlq._mark.<N>``: two tokens, so never a consumer's subject) also
  record retries; ``list`` shows both in its STATUS column.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
from typing import Any

import msgspec
import nats.errors
from nats.js.errors import NotFoundError

from draflow.events.codec import DecodeError, decode_raw
from draflow.infra.auth.roles import ADMIN, CLI
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.cli.connection import add_nats_url_arg
from draflow.services.cli.export import connect_store, settings_with_url
from draflow.services.cli.main import UserError

__all__ = ["DeadLetter", "dead_letters", "register"]

HDR_MARK = "Draflow-Dlq-Mark"
HDR_MARK_OF = "Draflow-Dlq-Of"
HDR_RETRY_SEQ = "Draflow-Dlq-Retry-Seq"
# what a direct get adds about the dead letter itself (shown as its own fields, not as headers)
_READ_HEADERS = frozenset({"Nats-Sequence", "Nats-Stream", "Nats-Subject", "Nats-Time-Stamp"})


class DeadLetter(msgspec.Struct, kw_only=True):
    seq: int
    consumer: str
    subject: str
    stream_seq: int
    type: str
    reason: str
    when: str
    deliveries: int
    headers: dict[str, str]
    data: bytes
    status: str = ""  # "", "discarded", "retried as N"
    retries: int = 0


def _time(stamp: str) -> str:
    if not stamp:
        return "-"
    return stamp[:19].replace(" ", "T") + "Z" if "T" not in stamp[:19] else stamp[:19] + "Z"


async def dead_letters(store: EventStore, settings: Settings) -> list[DeadLetter]:
    """Every dead letter still stored, with its status from the markers."""
    try:
        info = await store.js.stream_info(settings.dlq_stream)
    except NotFoundError:
        raise UserError(f"no dead-letter stream {settings.dlq_stream} yet (start a service first)") from None
    letters: dict[int, DeadLetter] = {}
    marks: list[dict[str, str]] = []
    for seq in range(int(info.state.first_seq or 1), int(info.state.last_seq) + 1):
        try:
            msg = await store.js.get_msg(settings.dlq_stream, seq, direct=True)
        except NotFoundError:
            continue  # deleted (discarded)
        h = dict(msg.headers or {})
        if HDR_MARK in h:
            marks.append(h)
            continue
        data = msg.data or b""
        try:
            etype = decode_raw(data).type
        except DecodeError:
            etype = h.get("Draflow-Type", "<undecodable>")
        letters[seq] = DeadLetter(
            seq=seq,
            consumer=h.get("Draflow-Dlq-Consumer", ""),
            subject=h.get("Draflow-Dlq-Subject", ""),
            stream_seq=int(h.get("Draflow-Dlq-Stream-Seq") or 0),
            type=etype,
            reason=h.get("Draflow-Dlq-Reason", ""),
            when=_time(h.get("Nats-Time-Stamp", "")),
            deliveries=int(h.get("Draflow-Dlq-Deliveries") or 0),
            headers=h,
            data=data,
        )
    for m in marks:
        letter = letters.get(int(m.get(HDR_MARK_OF) or 0))
        if letter is None:
            continue
        if m[HDR_MARK] == "discarded":
            letter.status = "discarded"
        elif m[HDR_MARK] == "retried":
            letter.retries += 1
            if letter.status != "discarded":
                letter.status = f"retried as {m.get(HDR_RETRY_SEQ, '?')}"
    return [letters[s] for s in sorted(letters)]


async def _one(store: EventStore, settings: Settings, seq: int) -> DeadLetter:
    for letter in await dead_letters(store, settings):
        if letter.seq == seq:
            return letter
    raise UserError(f"dead letter {seq}: not found in {settings.dlq_stream} (see draflow dlq list)")


async def _mark(store: EventStore, settings: Settings, letter: DeadLetter, action: str, **extra: str) -> None:
    n = letter.retries + 1 if action == "retried" else 0
    headers = {
        "Nats-Msg-Id": f"dlq-mark:{action}:{letter.seq}" + (f":{n}" if n > 1 else ""),
        HDR_MARK: action,
        HDR_MARK_OF: str(letter.seq),
        **extra,
    }
    now = datetime.datetime.now(datetime.UTC).isoformat()
    body = json.dumps({"mark": action, "of": letter.seq, "at": now})
    await store.js.publish(f"{settings.root}.dlq._mark.{letter.seq}", body.encode(), headers=headers)


async def retry(store: EventStore, settings: Settings, seq: int, again: bool) -> tuple[int, bool]:
    """Re-publish dead letter ``seq`` to its subject: (stream sequence, was it a duplicate)."""
    letter = await _one(store, settings, seq)
    if letter.status == "discarded":
        raise UserError(f"dead letter {seq}: discarded; nothing to retry")
    if letter.retries and not again:
        raise UserError(f"dead letter {seq}: already {letter.status} (use --again to re-publish once more)")
    if not letter.subject.startswith(f"{settings.root}.ev."):
        raise UserError(f"dead letter {seq}: subject {letter.subject!r} is not an event subject of this log")
    msg_id = f"dlq-retry:{seq}" + (f":{letter.retries + 1}" if letter.retries else "")
    headers = {k: v for k, v in letter.headers.items() if not k.startswith(("Nats-", "Draflow-Dlq-"))}
    headers.update(
        {
            "Nats-Msg-Id": msg_id,
            "Draflow-Retry-Of": str(letter.stream_seq),
            "Draflow-Retry-Consumer": letter.consumer,
        }
    )
    ack = await store.js.publish(letter.subject, letter.data, timeout=10.0, headers=headers)
    await _mark(store, settings, letter, "retried", **{HDR_RETRY_SEQ: str(ack.seq)})
    return int(ack.seq), bool(ack.duplicate)


async def discard(store: EventStore, settings: Settings, seq: int) -> str:
    letter = await _one(store, settings, seq)
    if letter.status == "discarded":
        return "already discarded"
    info = await store.js.stream_info(settings.dlq_stream)
    if not info.config.deny_delete:
        await store.js.delete_msg(settings.dlq_stream, seq)
        return "deleted"
    await _mark(store, settings, letter, "discarded")
    return "marked discarded (the dead-letter stream denies deletes)"


def _print_list(letters: list[DeadLetter], output: str) -> None:
    if output == "json":
        for x in letters:
            row = {k: v for k, v in msgspec.structs.asdict(x).items() if k not in ("data", "headers")}
            print(json.dumps(row))
        return
    print(
        f"{'SEQ':>6}  {'WHEN':<20}  {'CONSUMER':<20}  {'ORIG SEQ':>8}  {'SUBJECT':<44}  "
        f"{'TYPE':<26}  {'DELIV':>5}  {'STATUS':<16}  REASON"
    )
    for x in letters:
        print(
            f"{x.seq:>6}  {x.when:<20}  {x.consumer:<20}  {x.stream_seq:>8}  {x.subject:<44}  "
            f"{x.type:<26}  {x.deliveries:>5}  {x.status or '-':<16}  {x.reason}"
        )


def _show(letter: DeadLetter) -> None:
    print(f"dead letter {letter.seq}: {letter.type} at {letter.subject} (stream seq {letter.stream_seq})")
    fields = (
        ("consumer", letter.consumer),
        ("when", letter.when),
        ("deliveries", letter.deliveries),
        ("status", letter.status or "-"),
        ("reason", letter.reason),
    )
    for label, value in fields:
        print(f"{label + ':':<12}{value}")
    print("headers:")
    for k, v in sorted(letter.headers.items()):
        if k not in _READ_HEADERS:
            print(f"  {k}: {v}")
    print("event:")
    try:
        print(json.dumps(json.loads(letter.data), indent=2, sort_keys=True))
    except ValueError:
        print(repr(letter.data))


async def _run(args: argparse.Namespace) -> int:
    # re-publishing and deleting dead letters change the log: the admin's credential
    settings = settings_with_url(args.nats_url, ADMIN if args.action in ("retry", "discard") else CLI)
    store = await connect_store(settings)
    try:
        if args.action == "list":
            _print_list(await dead_letters(store, settings), args.output)
        elif args.action == "show":
            _show(await _one(store, settings, args.seq))
        elif args.action == "retry":
            new_seq, dup = await retry(store, settings, args.seq, args.again)
            note = " (already there: a repeated retry is a no-op)" if dup else ""
            print(f"dead letter {args.seq}: re-published as stream seq {new_seq}{note}")
        else:
            print(f"dead letter {args.seq}: {await discard(store, settings, args.seq)}")
        return 0
    except (nats.errors.Error, TimeoutError) as exc:
        raise UserError(f"dead-letter stream {settings.dlq_stream}: {exc!r}") from None
    finally:
        await store.close()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dlq", help="inspect, retry or discard dead letters")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = actions.add_parser("list", help="every dead letter with its reason and status")
    ls.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")
    for name, text in (
        ("show", "one dead letter: event, headers, reason"),
        ("retry", "re-publish the event to its subject"),
        ("discard", "delete the dead letter (or mark it discarded)"),
    ):
        a = actions.add_parser(name, help=text)
        a.add_argument("seq", type=int, metavar="N", help="sequence in the dead-letter stream (see list)")
        if name == "retry":
            a.add_argument("--again", action="store_true", help="re-publish even if retried before")
    for a in (ls, *[actions.choices[n] for n in ("show", "retry", "discard")]):
        add_nats_url_arg(a)
        a.set_defaults(func=run)


def run(args: argparse.Namespace) -> Any:
    return asyncio.run(_run(args))
