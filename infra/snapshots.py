"""Snapshots of folded state in JetStream, so a start folds only the log after the newest one.

Why JetStream and not a local file: a service started on another machine (or a second instance)
must find it. The snapshots live in their own stream (``<stream>_SNAPSHOTS``, subjects
``<root>.snap.<name>.<slot>``), next to the log, created by whoever manages the streams.

A snapshot is a run of messages on one *slot* subject: the body in chunks (the first one with
``Nats-Rollup: sub``, which makes the server drop what the slot held before), then a header
(:class:`SnapshotHeader`: the log position the state covers, the stream's identity, the state's
schema, the body's length and SHA-256). A writer uses the slot holding the oldest (or no valid)
snapshot, so the newest one is never touched while the next is written: a writer killed half-way
leaves a slot without a header (or with a body that does not match it), which a loader skips.

Loading tries the slots newest first and takes the first that is complete, matches its hash, is
of this stream (a stream deleted and created again numbers its events from 1: a snapshot of the
old one would be wrong) and of the state's schema; every one it skips is one log line saying why.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from draflow.infra.config import Settings
from draflow.infra.errors import EventStoreError
from draflow.infra.nats_client import DraflowClient, RawInbox
from draflow.infra.reader import StreamReader

__all__ = [
    "SLOTS",
    "Loaded",
    "SnapshotHeader",
    "SnapshotPolicy",
    "SnapshotStore",
    "Snapshotter",
    "load_snapshot",
    "snapshot_stream",
]

log = logging.getLogger(__name__)

SLOTS = 3
CHUNK = 256 * 1024  # well under the server's default max_payload (1 MB)
HDR_KIND = "Draflow-Snapshot"
FORMAT = 1


def snapshot_stream(settings: Settings) -> str:
    return f"{settings.stream}_SNAPSHOTS"


class SnapshotHeader(msgspec.Struct, frozen=True, kw_only=True):
    """What a snapshot covers; written after its body, so its presence means the body is whole."""

    format: int = FORMAT
    name: str
    schema: str  # the state's schema/code version: a loader of another one ignores the snapshot
    position: int  # the last log sequence folded into the state
    stream: str  # the identity (creation time) of the log it was folded from
    size: int
    sha256: str
    chunks: int
    written: str = ""  # wall time, for people
    writer: str = ""


@dataclass(frozen=True)
class Loaded:
    header: SnapshotHeader
    body: bytes


class SnapshotStore:
    """Reads and writes the snapshots of one system (its ``<stream>_SNAPSHOTS`` stream)."""

    def __init__(self, nc: DraflowClient, settings: Settings, actor: str, inbox: RawInbox) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=10.0)
        self.root = settings.root
        self.stream = snapshot_stream(settings)
        self.actor = actor
        self._reader = StreamReader(nc, inbox, self.stream)

    def subject(self, name: str, slot: int) -> str:
        return f"{self.root}.snap.{name}.{slot}"

    async def headers(self, name: str) -> list[tuple[int, SnapshotHeader | None, int]]:
        """Per slot: (slot, its header or None when it holds no complete snapshot, header's seq)."""
        out: list[tuple[int, SnapshotHeader | None, int]] = []
        for slot in range(SLOTS):
            rec = await self._reader.last(self.subject(name, slot))
            header: SnapshotHeader | None = None
            if rec is not None and rec.header(HDR_KIND) == "header":
                try:
                    header = msgspec.json.decode(rec.data, type=SnapshotHeader)
                except msgspec.DecodeError as exc:
                    log.warning("snapshot %s slot %d: unreadable header (%s); ignored", name, slot, exc)
            out.append((slot, header, 0 if rec is None else rec.seq))
        return out

    async def save(self, name: str, schema: str, position: int, stream_identity: str, body: bytes) -> int:
        """Store a snapshot in a slot holding none, else one no loader of this schema and stream
        would use, else the oldest; returns the slot."""

        def rank(entry: tuple[int, SnapshotHeader | None, int]) -> tuple[int, int]:
            header = entry[1]
            if header is None:
                return (0, 0)
            if header.schema != schema or header.stream != stream_identity or header.format != FORMAT:
                return (1, header.position)
            return (2, header.position)

        slot = min(await self.headers(name), key=rank)[0]
        subject = self.subject(name, slot)
        chunks = [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)] or [b""]
        for i, chunk in enumerate(chunks):
            hdrs = {HDR_KIND: "chunk"}
            if i == 0:
                hdrs["Nats-Rollup"] = "sub"
            await self.js.publish(subject, chunk, stream=self.stream, headers=hdrs)
        header = SnapshotHeader(
            name=name,
            schema=schema,
            position=position,
            stream=stream_identity,
            size=len(body),
            sha256=hashlib.sha256(body).hexdigest(),
            chunks=len(chunks),
            written=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            writer=self.actor,
        )
        await self.js.publish(
            subject, msgspec.json.encode(header), stream=self.stream, headers={HDR_KIND: "header"}
        )
        return slot

    async def load(self, name: str, schema: str, stream_identity: str, last_seq: int) -> Loaded | None:
        """The newest valid snapshot of ``name`` for this stream and schema (None: fold from 1)."""
        slots = await self.headers(name)
        candidates = sorted(
            # newest first: the furthest position, and of two at one position the later written
            ((h, seq, slot) for slot, h, seq in slots if h is not None),
            key=lambda c: (-c[0].position, -c[1]),
        )
        for header, seq, slot in candidates:
            why = ""
            if header.format != FORMAT or header.schema != schema:
                why = f"schema {header.schema} (format {header.format}), this code reads {schema}"
            elif header.stream != stream_identity:
                why = f"of another log (stream created {header.stream}, this one {stream_identity})"
            elif header.position > last_seq:
                why = f"covers position {header.position}, past the log's end {last_seq}"
            if why:
                log.warning("snapshot %s slot %d at %d ignored: %s", name, slot, header.position, why)
                continue
            body = await self._body(name, slot, seq, header)
            if body is not None:
                return Loaded(header, body)
        return None

    async def _body(self, name: str, slot: int, header_seq: int, header: SnapshotHeader) -> bytes | None:
        parts: list[bytes] = []
        async for records in self._reader.read(self.subject(name, slot), 1, header_seq - 1, 64, 10.0):
            parts.extend(r.data for r in records)
        body = b"".join(parts)
        if len(parts) != header.chunks or len(body) != header.size:
            log.warning(
                "snapshot %s slot %d at %d ignored: corrupt (%d chunks, %d bytes; the header says %d, %d)",
                name, slot, header.position, len(parts), len(body), header.chunks, header.size,
            )  # fmt: skip
            return None
        if hashlib.sha256(body).hexdigest() != header.sha256:
            log.warning(
                "snapshot %s slot %d at %d ignored: corrupt (SHA-256 differs)", name, slot, header.position
            )
            return None
        return body


@dataclass(frozen=True)
class SnapshotPolicy:
    """When to write: after ``every_events`` new events or ``every_s`` seconds with at least one
    (0 turns that trigger off; both 0: never write). ``DRAFLOW_SNAPSHOT_EVERY_EVENTS`` and
    ``DRAFLOW_SNAPSHOT_EVERY_S`` set them for every service."""

    every_events: int = 20_000
    every_s: float = 300.0
    load: bool = True  # start from a snapshot (DRAFLOW_SNAPSHOT_LOAD=0: fold the whole log)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> SnapshotPolicy:
        env = os.environ if environ is None else environ
        return cls(
            every_events=int(env.get("DRAFLOW_SNAPSHOT_EVERY_EVENTS") or cls.every_events),
            every_s=float(env.get("DRAFLOW_SNAPSHOT_EVERY_S") or cls.every_s),
            load=(env.get("DRAFLOW_SNAPSHOT_LOAD") or "1") != "0",
        )

    @property
    def writes(self) -> bool:
        return self.every_events > 0 or self.every_s > 0

    def due(self, events_since: int, seconds_since: float, state_size: int = 0) -> bool:
        """``state_size``: how many objects a snapshot holds. A snapshot costs in proportion to
        it, so the events trigger waits for at least that many events: the cost per event folded
        stays the same at any cluster size (and a restart never folds more events than objects,
        or ``every_events``, past its snapshot)."""
        if events_since <= 0:
            return False
        if self.every_events > 0 and events_since >= max(self.every_events, state_size):
            return True
        return self.every_s > 0 and seconds_since >= self.every_s


# what a snapshot is taken of: the position it covers and a function that encodes the state as
# it was then (called in a worker thread, so it must work on a private copy); None: not now
Capture = Callable[[], tuple[int, Callable[[], bytes]] | None]


class Snapshotter:
    """Writes one state's snapshots in the background, never in the way of the fold or decisions:
    the capture is a cheap copy taken between two batches, the encoding runs in a thread and the
    writes are plain publishes; a failed write is a log line and the next one is tried later."""

    def __init__(
        self,
        store: SnapshotStore,
        name: str,
        schema: str,
        identity: Callable[[], str | None],
        capture: Capture,
        position: Callable[[], int],
        policy: SnapshotPolicy,
        *,
        since: int = 0,
        size: Callable[[], int] | None = None,
    ) -> None:
        """``size``: how many objects the state holds now (scales the events trigger, see
        :meth:`SnapshotPolicy.due`)."""
        self.store = store
        self.name = name
        self.schema = schema
        self.identity = identity
        self.capture = capture
        self.position = position
        self.policy = policy
        self.size = size
        self.saved_at = since  # the position of the last snapshot written or loaded
        self._saved_time = time.monotonic()
        self.written = 0
        self._task: asyncio.Task[None] | None = None

    def start(self, check_s: float = 0.5) -> None:
        if self.policy.writes and self._task is None:
            self._task = asyncio.create_task(self._loop(check_s), name=f"snapshot-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _loop(self, check_s: float) -> None:
        while True:
            await asyncio.sleep(check_s)
            size = self.size() if self.size is not None else 0
            if self.policy.due(self.position() - self.saved_at, time.monotonic() - self._saved_time, size):
                await self.save_now()

    async def save_now(self) -> int | None:
        """Capture and write a snapshot now; its position (None if it failed)."""
        identity = self.identity()
        if not identity:
            return None
        captured = self.capture()
        if captured is None:
            self._saved_time = time.monotonic()
            return None
        position, encode = captured
        try:
            body = await asyncio.to_thread(encode)
            began = time.monotonic()
            await self.store.save(self.name, self.schema, position, identity, body)
        except (EventStoreError, OSError, TimeoutError, msgspec.MsgspecError) as exc:
            log.warning("snapshot %s at %d not written: %s", self.name, position, exc)
            return None
        except Exception as exc:  # nats errors (permissions, no stream): try again at the next one
            log.warning("snapshot %s at %d not written: %r", self.name, position, exc)
            return None
        finally:
            self._saved_time = time.monotonic()
        self.saved_at = position
        self.written += 1
        took = time.monotonic() - began
        log.info("snapshot %s at %d written (%d bytes, %.3fs)", self.name, position, len(body), took)
        return position


async def load_snapshot(
    store: SnapshotStore, name: str, schema: str, identity: str | None, last_seq: int
) -> Loaded | None:
    """:meth:`SnapshotStore.load`, where a store that cannot be read means no snapshot (a log line)."""
    if not identity:
        return None
    try:
        return await store.load(name, schema, identity, last_seq)
    except Exception as exc:  # no snapshot stream, no permission, a timeout: fold from the start
        log.warning("no snapshot %s loaded: %r; folding the whole log", name, exc)
        return None
