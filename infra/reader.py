"""Reading the log fast: stored messages in sequence order, in batches, on the raw fast path.

Three strategies, picked per call:

* one aggregate (a literal subject): a chain of single direct gets (``next_by_subj``), each
  O(1) on the server; aggregates are short, so this is the cheapest way to load one (a batched
  read or a consumer first counts the pending messages, a scan of the stream). Past
  ``CHAIN_LIMIT`` events the rest comes in large direct-get batches.
* a wildcard filter starts with batched direct gets, cheapest for short reads (a tail, a small
  range); once more than a few batches are pending it switches to the next strategy.
* a long wildcard read (a projection rebuild, a replay, ``draflow log``): an ephemeral push consumer
  (ack none, flow control) delivering into a raw subscription, so no ``Msg`` objects are built.
  Flow-control requests are answered only after the caller has taken the records before them,
  which bounds memory; a gap in consumer sequences (a reconnect mid-replay) raises
  :class:`StoreUnavailable` so the caller can resume from the last sequence it saw.

Reads stop once caught up: at the stream's end as of the moment the read started (or ``to_seq``).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from draflow.infra.errors import StoreUnavailable, StreamMissing
from draflow.infra.nats_client import DraflowClient, RawInbox

__all__ = ["CHAIN_LIMIT", "RawRecord", "StreamReader", "StreamStatus", "header_value", "status_of"]

CHAIN_LIMIT = 64
DIRECT_BATCH = 512
LONG_DIRECT_BATCH = 4096


def header_value(headers: bytes | None, name: bytes) -> str | None:
    """One header's value from a raw NATS header block (exact-case name, as the server writes it)."""
    if not headers:
        return None
    key = b"\r\n" + name + b":"
    i = headers.find(key)
    if i < 0:
        return None
    start = i + len(key)
    end = headers.find(b"\r\n", start)
    return headers[start:end].strip().decode()


def status_of(headers: bytes | None) -> bytes:
    """The status code of a status message (``NATS/1.0 404 ...``), or b'' for a normal message."""
    if headers is not None and headers[8:9] == b" ":
        return headers[9:12]
    return b""


class RawRecord(msgspec.Struct, gc=False):
    """A stored message: stream sequence, subject, payload, raw headers, storage time (ns).

    A msgspec Struct (created in C, not tracked by the cyclic GC): replays create one per event.
    """

    seq: int
    raw_subject: bytes | None
    data: bytes
    headers: bytes | None
    ts_ns: int

    @property
    def subject(self) -> str:
        if self.raw_subject is not None:
            return self.raw_subject.decode()
        return header_value(self.headers, b"Nats-Subject") or ""

    @property
    def time(self) -> datetime.datetime | None:
        """When the server stored the message."""
        if self.ts_ns:
            return datetime.datetime.fromtimestamp(self.ts_ns / 1e9, datetime.UTC)
        stamp = header_value(self.headers, b"Nats-Time-Stamp")
        if not stamp:
            return None
        try:
            return msgspec.convert(stamp[:26].rstrip("Z") + "Z", datetime.datetime)
        except msgspec.ValidationError:
            return None

    def header(self, name: str) -> str | None:
        return header_value(self.headers, name.encode())


class _StreamState(msgspec.Struct):
    first_seq: int = 0
    last_seq: int = 0


class _ClusterInfo(msgspec.Struct):
    leader: str = ""


class StreamStatus(msgspec.Struct):
    """What ``$JS.API.STREAM.INFO`` says about the stream: its identity (creation time, kept by
    the server across restarts) and its sequence range."""

    created: str = ""
    state: _StreamState = msgspec.field(default_factory=_StreamState)
    cluster: _ClusterInfo | None = None
    error: dict[str, Any] | None = None

    @property
    def last_seq(self) -> int:
        return self.state.last_seq

    @property
    def leaderless(self) -> bool:
        """Answered by a replica of a stream whose group has no leader (an election under way,
        e.g. while a restarted server rejoins): nats-server then lets each member answer with its
        own copy, which may end before what the leader had committed and others have read."""
        return self.cluster is not None and not self.cluster.leader


ERR_STREAM_NOT_FOUND = 10059


class _ConsumerCreated(msgspec.Struct):
    name: str = ""
    num_pending: int = 0
    error: dict[str, Any] | None = None


_json = msgspec.json.Encoder()
_created = msgspec.json.Decoder(_ConsumerCreated)
_status = msgspec.json.Decoder(StreamStatus)


class StreamReader:
    def __init__(self, nc: DraflowClient, inbox: RawInbox, stream: str, api_prefix: str = "$JS.API") -> None:
        self.nc = nc
        self.inbox = inbox
        self.stream = stream
        self.api = api_prefix
        self.direct_subject = f"{api_prefix}.DIRECT.GET.{stream}"

    async def request(self, subject: str, payload: bytes, wait_s: float = 5.0) -> tuple[bytes, bytes | None]:
        reply, token, fut = self.inbox.future()
        try:
            await self.nc.publish(subject, payload, reply=reply)
            return await asyncio.wait_for(fut, wait_s)
        except TimeoutError:
            raise StoreUnavailable(f"{subject}: no answer within {wait_s}s") from None
        finally:
            self.inbox.cancel(token)

    async def stream_status(self) -> StreamStatus:
        """The stream's identity and sequence range; StoreUnavailable when there is no answer or
        no such stream (a stream that is gone may be created again: the caller keeps waiting)."""
        data, hdrs = await self.request(f"{self.api}.STREAM.INFO.{self.stream}", b"")
        code = status_of(hdrs)
        if code:
            raise StoreUnavailable(f"stream {self.stream}: JetStream not answering ({code.decode()})")
        try:
            status = _status.decode(data)
        except msgspec.DecodeError as exc:
            raise StoreUnavailable(f"stream {self.stream}: unreadable stream info: {exc}") from None
        if status.error is not None:
            if status.error.get("err_code") == ERR_STREAM_NOT_FOUND:
                raise StreamMissing(f"stream {self.stream} does not exist (deleted?)")
            raise StoreUnavailable(f"stream {self.stream}: {status.error}")
        return status

    async def direct_get(self, subject: str, payload: bytes) -> RawRecord | None:
        data, hdrs = await self.request(subject, payload)
        status = status_of(hdrs)
        if status == b"404":
            return None
        if status:
            raise StoreUnavailable(f"direct get {subject}: status {status.decode()}")
        return RawRecord(int(header_value(hdrs, b"Nats-Sequence") or 0), None, data, hdrs, 0)

    async def last(self, subject: str) -> RawRecord | None:
        return await self.direct_get(f"{self.direct_subject}.{subject}", b"")

    async def next_on_subject(self, subject: str, seq: int) -> RawRecord | None:
        return await self.direct_get(self.direct_subject, _json.encode({"seq": seq, "next_by_subj": subject}))

    async def direct_batch(
        self, subject_filter: str, seq: int, batch: int, wait_s: float = 10.0
    ) -> tuple[list[RawRecord], int]:
        """One batched direct get: up to ``batch`` records from ``seq``, and how many match after them."""
        fut: asyncio.Future[tuple[list[RawRecord], int]] = asyncio.get_running_loop().create_future()
        records: list[RawRecord] = []

        def handler(data: bytes, headers: bytes | None) -> bool:
            status = status_of(headers)
            if not status:
                seq = int(header_value(headers, b"Nats-Sequence") or 0)
                records.append(RawRecord(seq, None, data, headers, 0))
                return False
            if not fut.done():
                if status == b"204":  # end of batch
                    fut.set_result((records, int(header_value(headers, b"Nats-Num-Pending") or 0)))
                elif status == b"404":
                    fut.set_result((records, 0))
                else:
                    err = f"direct get {subject_filter}: status {status.decode()}"
                    fut.set_exception(StoreUnavailable(err))
            return True

        reply, token = self.inbox.register(handler)
        try:
            req = _json.encode({"seq": seq, "next_by_subj": subject_filter, "batch": batch})
            await self.nc.publish(self.direct_subject, req, reply=reply)
            return await asyncio.wait_for(fut, wait_s)
        except TimeoutError:
            raise StoreUnavailable(f"direct get {subject_filter}: no answer within {wait_s}s") from None
        finally:
            self.inbox.cancel(token)

    async def read(
        self, subject_filter: str, from_seq: int, to_seq: int | None, batch: int, wait_s: float
    ) -> AsyncIterator[list[RawRecord]]:
        seq = max(1, from_seq)
        if to_seq is not None and to_seq < seq:
            return
        literal = not any(c in subject_filter for c in "*>")
        if literal:
            chain: list[RawRecord] = []
            while len(chain) < CHAIN_LIMIT:
                rec = await self.next_on_subject(subject_filter, seq)
                if rec is None or (to_seq is not None and rec.seq > to_seq):
                    if chain:
                        yield chain
                    return
                chain.append(rec)
                seq = rec.seq + 1
            yield chain
        # Batched direct gets are cheapest for short reads (a tail, a small range, the rest of a
        # long aggregate); a long wildcard replay is faster through a consumer, so switch to one
        # once much more is pending.
        size = LONG_DIRECT_BATCH if literal else DIRECT_BATCH
        while True:
            records, pending = await self.direct_batch(subject_filter, seq, size, wait_s)
            if to_seq is not None and records and records[-1].seq >= to_seq:
                records = [r for r in records if r.seq <= to_seq]
                pending = 0
            if records:
                seq = records[-1].seq + 1
                yield records
            if pending == 0 or not records:
                return
            if not literal and pending > 4 * DIRECT_BATCH:
                break
        async for records in self._consume(subject_filter, seq, to_seq, batch, wait_s):
            yield records

    async def last_per_subject(
        self, subject_filter: str, batch: int, wait_s: float
    ) -> AsyncIterator[list[RawRecord]]:
        """The last stored message of every subject matching the filter, in stream order."""
        async for records in self._consume(subject_filter, 1, None, batch, wait_s, last_per_subject=True):
            yield records

    async def _consume(
        self,
        subject_filter: str,
        seq: int,
        to_seq: int | None,
        batch: int,
        wait_s: float,
        *,
        last_per_subject: bool = False,
    ) -> AsyncIterator[list[RawRecord]]:
        records: list[RawRecord] = []
        fc_replies: list[tuple[int, bytes]] = []  # (records received before it, reply subject)
        last_cseq = 0
        caught_up = gap = False
        ready = asyncio.Event()
        loop = asyncio.get_running_loop()
        sending: set[asyncio.Task[None]] = set()
        high_water = 4 * batch
        append = records.append

        def sink(subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
            nonlocal last_cseq, caught_up, gap
            if headers is not None and headers[8:9] == b" ":
                if reply:  # a flow-control request
                    if len(records) < high_water:  # the caller keeps up: let the server go on
                        task = loop.create_task(self.nc.publish(reply.decode(), b""))
                        sending.add(task)
                        task.add_done_callback(sending.discard)
                    else:  # answered once the caller has taken what came before: bounded memory
                        fc_replies.append((len(records), reply))
                        ready.set()
                return  # an idle heartbeat
            # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>, or the v2 form
            # with domain and account hash (two more tokens in front, one token after).
            t = reply.split(b".")
            off = 0 if len(t) == 9 else 2
            sseq = int(t[5 + off])
            cseq = int(t[6 + off])
            if cseq != last_cseq + 1:
                gap = True
            last_cseq = cseq
            if to_seq is not None and sseq > to_seq:
                caught_up = True
            else:
                append(RawRecord(sseq, subject, data, headers, int(t[7 + off])))
                if t[8 + off] == b"0" or sseq == to_seq:
                    caught_up = True
            ready.set()  # cheap once set; the caller takes whatever arrived in one go

        sub = await self.nc.raw_subscribe(self.nc.new_inbox(), sink)
        name = ""
        try:
            config: dict[str, Any] = {
                "deliver_subject": sub.subject,
                "ack_policy": "none",
                "filter_subject": subject_filter,
                "flow_control": True,
                "idle_heartbeat": 5_000_000_000,
                "mem_storage": True,
                "num_replicas": 1,
                "inactive_threshold": 30_000_000_000,
                "replay_policy": "instant",
            }
            if last_per_subject:
                config["deliver_policy"] = "last_per_subject"
            elif seq > 1:
                config.update(deliver_policy="by_start_sequence", opt_start_seq=seq)
            else:
                config["deliver_policy"] = "all"
            data, _ = await self.request(
                f"{self.api}.CONSUMER.CREATE.{self.stream}",
                _json.encode({"stream_name": self.stream, "config": config}),
            )
            created = _created.decode(data)
            if created.error is not None:
                raise StoreUnavailable(f"replay consumer on {self.stream}: {created.error}")
            name = created.name
            if created.num_pending == 0:
                return
            while True:
                if not records and not fc_replies and not caught_up and not gap:
                    ready.clear()
                    try:
                        await asyncio.wait_for(ready.wait(), wait_s)
                    except TimeoutError:
                        raise StoreUnavailable(f"replay of {subject_filter}: stalled for {wait_s}s") from None
                if gap:
                    raise StoreUnavailable(f"replay of {subject_filter}: messages lost (reconnect?)")
                taken = records[:]
                del records[:]
                answered = [r for n, r in fc_replies if n <= len(taken)]
                del fc_replies[: len(answered)]
                for i in range(len(fc_replies)):
                    fc_replies[i] = (fc_replies[i][0] - len(taken), fc_replies[i][1])
                if taken:
                    yield taken
                for reply in answered:
                    await self.nc.publish(reply.decode(), b"")
                if caught_up and not records:
                    return
                if not taken and not answered:
                    ready.clear()
        finally:
            await self.nc.raw_unsubscribe(sub)
            if name and not self.nc.is_closed:
                done_reply, _ = self.inbox.register(lambda data, headers: True)
                try:
                    delete = f"{self.api}.CONSUMER.DELETE.{self.stream}.{name}"
                    await self.nc.publish(delete, b"", reply=done_reply)
                except Exception:  # best effort: inactive_threshold removes it anyway
                    pass
