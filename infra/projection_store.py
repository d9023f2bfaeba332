"""Projections persisted in SQLite (aiosqlite, WAL), state and checkpoint in one transaction.

Each projection gets a table ``p_<name>(key, value)`` (value = the row's msgspec JSON with a
deterministic key order); ``checkpoints(consumer, seq)`` holds the stream sequence each consumer
has applied. A batch of events is applied inside ``BEGIN IMMEDIATE`` ... ``COMMIT`` together with
the new checkpoint, so a crash leaves either both or neither; events at or below the checkpoint are
skipped, so redeliveries are no-ops. :func:`projection_consumer` wires a store to an ordered durable
consumer that resumes right after the checkpoint; :func:`rebuild` replays the log from the
checkpoint (sequence 1 for a fresh file) without a durable consumer.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Literal

import aiosqlite
import msgspec

from draflow.events.codec import DecodeError, decode
from draflow.events.envelope import Envelope, Event
from draflow.infra.consumer import ConsumerOptions, DurableConsumer, Handler
from draflow.infra.errors import PoisonEvent, StreamReset
from draflow.infra.eventstore import EventStore
from draflow.infra.shortfall import Shortfall
from draflow.projections.base import Projection, subject_matches

__all__ = ["ProjectionHandler", "ProjectionStore", "projection_consumer", "rebuild"]

log = logging.getLogger(__name__)

OnReset = Literal["stop", "rebuild"]

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_encoder = msgspec.json.Encoder(order="deterministic")


class _Table:
    def __init__(self, projection: Projection[Any], root: str) -> None:
        if not _NAME.match(projection.name):
            raise ValueError(f"projection name {projection.name!r}: must match {_NAME.pattern}")
        self.projection = projection
        self.table = f"p_{projection.name}"
        self.filters = projection.filters(root)
        self.every = len(self.filters) == 1 and self.filters[0].endswith(".ev.>")
        self.decoder = msgspec.json.Decoder(projection.state_type)

    def wants(self, subject: str) -> bool:
        return self.every or any(subject_matches(f, subject) for f in self.filters)


class Batch:
    """The rows a transaction has touched, written back (with the checkpoint) on commit."""

    def __init__(self, store: ProjectionStore, consumer: str, checkpoint: int) -> None:
        self.store = store
        self.consumer = consumer
        self.checkpoint = checkpoint
        self.start = checkpoint
        self.rows: dict[tuple[str, str], Any] = {}  # (table, key) -> state, None = deleted
        self.applied = 0

    async def _row(self, t: _Table, key: str) -> Any:
        k = (t.table, key)
        if k not in self.rows:
            self.rows[k] = await self.store._load(t, key)
        return self.rows[k]

    async def apply(self, env: Envelope[Event]) -> bool:
        """Apply one event to every projection that wants it; False if at/below the checkpoint."""
        if env.seq <= self.checkpoint:
            return False
        updates: list[tuple[tuple[str, str], Any]] = []
        for t in self.store.tables:
            if not t.wants(env.subject):
                continue
            for key in t.projection.keys(env):
                state = await self._row(t, key)
                try:
                    new = t.projection.apply(key, state, env)
                except Exception as exc:  # reducers are pure: a failure is deterministic
                    name = t.projection.name
                    raise PoisonEvent(f"projection {name}: {type(exc).__name__}: {exc}") from exc
                updates.append(((t.table, key), new))
        for k, new in updates:
            self.rows[k] = new
        self.checkpoint = env.seq
        self.applied += 1
        return True

    def skip(self, seq: int) -> None:
        """Move the checkpoint past an event that will never be applied (dead-lettered)."""
        self.checkpoint = max(self.checkpoint, seq)


class ProjectionStore:
    def __init__(self, db: aiosqlite.Connection, projections: Sequence[Projection[Any]], root: str) -> None:
        self.db = db
        self.tables = [_Table(p, root) for p in projections]
        self._by_name = {t.projection.name: t for t in self.tables}
        self._shortfall: dict[str, Shortfall] = {}  # per stream: when "it ends before" is believed

    @classmethod
    async def open(
        cls, path: str | Path, projections: Sequence[Projection[Any]], root: str = "draflow"
    ) -> ProjectionStore:
        db = await aiosqlite.connect(str(path), isolation_level=None)
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.execute("PRAGMA busy_timeout=5000")
        store = cls(db, projections, root)
        await db.execute(
            "CREATE TABLE IF NOT EXISTS checkpoints (consumer TEXT PRIMARY KEY, seq INTEGER NOT NULL)"
        )
        # the identity (creation time) of the stream the checkpoints are positions in
        await db.execute(
            "CREATE TABLE IF NOT EXISTS stream_identity (stream TEXT PRIMARY KEY, created TEXT NOT NULL)"
        )
        for t in store.tables:
            await db.execute(
                f"CREATE TABLE IF NOT EXISTS {t.table} (key TEXT PRIMARY KEY, value BLOB NOT NULL)"
            )
        return store

    async def close(self) -> None:
        await self.db.close()

    async def checkpoint(self, consumer: str) -> int:
        async with self.db.execute("SELECT seq FROM checkpoints WHERE consumer = ?", (consumer,)) as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def verify_stream(self, events: EventStore, consumer: str) -> None:
        """Raise StreamReset when ``consumer``'s checkpoint is a position in another stream than
        the one ``events`` reads now (deleted and created again, or shorter than the checkpoint:
        ``StoreUnavailable`` until that is proven, ``infra.shortfall``). The first verification of
        a file records the stream's identity."""
        status = await events.stream_status()
        checkpoint = await self.checkpoint(consumer)
        async with self.db.execute(
            "SELECT created FROM stream_identity WHERE stream = ?", (events.stream,)
        ) as cur:
            row = await cur.fetchone()
        known = str(row[0]) if row else None
        shortfall = self._shortfall.setdefault(events.stream, Shortfall(events.stream))
        if known not in (None, status.created) or shortfall.judge(status, checkpoint, time.monotonic()):
            old = known if known is not None else status.created
            raise StreamReset(events.stream, checkpoint, status.last_seq, old, status.created)
        if known is None:
            await self._set_identity(events.stream, status.created)

    async def _set_identity(self, stream: str, created: str) -> None:
        await self.db.execute(
            "INSERT INTO stream_identity (stream, created) VALUES (?, ?) "
            "ON CONFLICT(stream) DO UPDATE SET created = excluded.created",
            (stream, created),
        )

    async def clear(self, stream: str, created: str) -> None:
        """Drop every row and checkpoint (one transaction) and record ``created`` as the identity
        of ``stream``: the projections are then rebuilt from sequence 1 of that stream."""
        await self.db.execute("BEGIN IMMEDIATE")
        try:
            for t in self.tables:
                await self.db.execute(f"DELETE FROM {t.table}")
            await self.db.execute("DELETE FROM checkpoints")
            await self._set_identity(stream, created)
            await self.db.execute("COMMIT")
        except BaseException:
            await self.db.execute("ROLLBACK")
            raise

    async def _load(self, t: _Table, key: str) -> Any:
        async with self.db.execute(f"SELECT value FROM {t.table} WHERE key = ?", (key,)) as cur:
            row = await cur.fetchone()
        return None if row is None else t.decoder.decode(row[0])

    @contextlib.asynccontextmanager
    async def transaction(self, consumer: str) -> AsyncIterator[Batch]:
        """``BEGIN IMMEDIATE``; on normal exit the touched rows and the checkpoint are committed."""
        await self.db.execute("BEGIN IMMEDIATE")
        try:
            async with self.db.execute("SELECT seq FROM checkpoints WHERE consumer = ?", (consumer,)) as cur:
                row = await cur.fetchone()
            batch = Batch(self, consumer, int(row[0]) if row else 0)
            yield batch
            await self._flush(batch)
            await self.db.execute("COMMIT")
        except BaseException:
            await self.db.execute("ROLLBACK")
            raise

    async def _flush(self, batch: Batch) -> None:
        upserts: dict[str, list[tuple[str, bytes]]] = {}
        deletes: dict[str, list[tuple[str]]] = {}
        for (table, key), state in batch.rows.items():
            if state is None:
                deletes.setdefault(table, []).append((key,))
            else:
                upserts.setdefault(table, []).append((key, _encoder.encode(state)))
        for table, rows in upserts.items():
            await self.db.executemany(
                f"INSERT INTO {table} (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                rows,
            )
        for table, keys in deletes.items():
            await self.db.executemany(f"DELETE FROM {table} WHERE key = ?", keys)
        if batch.checkpoint != batch.start:
            await self.db.execute(
                "INSERT INTO checkpoints (consumer, seq) VALUES (?, ?) "
                "ON CONFLICT(consumer) DO UPDATE SET seq = excluded.seq",
                (batch.consumer, batch.checkpoint),
            )

    async def apply(self, consumer: str, envs: Sequence[Envelope[Event]]) -> int:
        """Apply a batch in one transaction; returns how many events were new."""
        async with self.transaction(consumer) as batch:
            for env in envs:
                try:
                    await batch.apply(env)
                except PoisonEvent:
                    batch.skip(env.seq)
        return batch.applied

    async def get(self, projection: str, key: str) -> Any:
        return await self._load(self._by_name[projection], key)

    async def rows(self, projection: str) -> dict[str, Any]:
        t = self._by_name[projection]
        async with self.db.execute(f"SELECT key, value FROM {t.table} ORDER BY key") as cur:
            return {k: t.decoder.decode(v) async for k, v in cur}

    async def dump(self) -> bytes:
        """Every row and checkpoint in a canonical byte form (to compare a rebuild with the original)."""
        out = bytearray()
        async with self.db.execute("SELECT consumer, seq FROM checkpoints ORDER BY consumer") as cur:
            async for consumer, seq in cur:
                out += f"checkpoint {consumer} {seq}\n".encode()
        for t in sorted(self.tables, key=lambda t: t.table):
            async with self.db.execute(f"SELECT key, value FROM {t.table} ORDER BY key") as cur:
                async for key, value in cur:
                    out += f"{t.table} {key} ".encode() + bytes(value) + b"\n"
        return bytes(out)


class ProjectionHandler(Handler):
    """Drives a :class:`ProjectionStore` from a durable consumer: one transaction per fetched batch."""

    def __init__(self, store: ProjectionStore, consumer: str) -> None:
        self.store = store
        self.consumer = consumer
        self._batch: Batch | None = None

    @contextlib.asynccontextmanager
    async def batch(self) -> AsyncIterator[None]:
        async with self.store.transaction(self.consumer) as b:
            self._batch = b
            try:
                yield
            finally:
                self._batch = None

    async def handle(self, env: Envelope[Event]) -> None:
        assert self._batch is not None, "handle() outside batch()"
        try:
            await self._batch.apply(env)
        except PoisonEvent:
            self._batch.skip(env.seq)  # dead-lettered by the consumer; never applied, also not on rebuild
            raise


async def _verified_checkpoint(
    events: EventStore, db: ProjectionStore, consumer: str, on_reset: OnReset
) -> int:
    """The checkpoint to resume after, once the stream is known to be the checkpoint's stream.
    A reset stream raises StreamReset (``stop``) or empties the projections (``rebuild``: 0)."""
    try:
        await db.verify_stream(events, consumer)
    except StreamReset as exc:
        if on_reset != "rebuild":
            raise
        log.error("projection %s: %s; dropping the projections, rebuilding from sequence 1", consumer, exc)
        await db.clear(exc.stream, exc.new_identity)
        return 0
    return await db.checkpoint(consumer)


def projection_consumer(
    events: EventStore,
    db: ProjectionStore,
    name: str,
    options: ConsumerOptions | None = None,
    *,
    on_reset: OnReset = "stop",
) -> DurableConsumer:
    """An ordered durable consumer feeding ``db``, resuming right after its checkpoint.

    Whenever the consumer is (re)created the stream is verified to be the one the checkpoint
    belongs to; a stream deleted and created again raises StreamReset out of ``run`` (``stop``)
    or drops the projections and folds the new stream from sequence 1 (``rebuild``).
    """
    filters = sorted({f for t in db.tables for f in t.filters})
    if any(f.endswith(".ev.>") for f in filters):
        filters = [events.all_events]
    opts = msgspec.structs.replace(options or ConsumerOptions(), ordered=True)

    async def checkpoint() -> int:
        return await _verified_checkpoint(events, db, name, on_reset)

    return DurableConsumer(events, name, filters, ProjectionHandler(db, name), opts, start_after=checkpoint)


async def rebuild(
    events: EventStore, db: ProjectionStore, consumer: str, *, batch: int = 2048, on_reset: OnReset = "stop"
) -> int:
    """Replay the log into ``db`` from its checkpoint (1 for a fresh file); returns events applied.

    Events a live consumer would dead-letter (undecodable, or a reducer failure) are skipped the
    same way, so a rebuild reproduces the live projection exactly. A checkpoint of another stream
    (deleted and created again) raises StreamReset, or with ``on_reset="rebuild"`` starts over.
    """
    filters = sorted({f for t in db.tables for f in t.filters})
    filt = filters[0] if len(filters) == 1 else events.all_events
    start = await _verified_checkpoint(events, db, consumer, on_reset) + 1
    applied = 0
    async for records in events.read_raw(filt, start, batch=batch):
        async with db.transaction(consumer) as b:
            for r in records:
                # the same rules as the live consumer: unmatched and undecodable events never reach
                # the projection (no checkpoint move); reducer failures are skipped past.
                if len(filters) > 1 and not any(subject_matches(f, r.subject) for f in filters):
                    continue
                try:
                    env = decode(r.data, r.seq)
                except DecodeError:
                    continue
                try:
                    await b.apply(env)
                except PoisonEvent:
                    b.skip(r.seq)
            applied += b.applied
    return applied
