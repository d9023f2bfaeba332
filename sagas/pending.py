"""Which sagas are unfinished, found without reading every saga the log ever held.

An engine that starts resumes what earlier instances left unfinished. Asking the log for the
last event of every saga subject reads one message per saga ever run (every pod's scheduling
saga): a start that grows with history (on a 200k-event log of pod lifecycles ~0.8 s, mostly the
server reading its compressed blocks for the heads). Instead each start stores the unfinished
set it found as a snapshot (``<root>.snap.sagas-pending.<slot>``: the saga ids and the log
position they are complete up to) and the next start reads only the saga events after that
position: a saga is unfinished at the log's end if it was at the snapshot and no terminal event
came since, or its last event since is not terminal. No snapshot (or an unusable one: another
log, schema or a corrupt body, each skipped with a log line; or ``DRAFLOW_SNAPSHOT_LOAD=0``): the
whole scan, as before. The set is written at each start only, so a start reads the saga events
since the previous start.
"""

from __future__ import annotations

import logging

import msgspec

from draflow.events.saga import TERMINAL_SAGA_EVENTS
from draflow.infra.eventstore import EventStore
from draflow.infra.snapshots import SnapshotPolicy, load_snapshot

__all__ = ["SCHEMA", "SNAPSHOT", "PendingSagas", "pending_after"]

log = logging.getLogger(__name__)

SNAPSHOT = "sagas-pending"
SCHEMA = "sagas-pending/1"
HDR_TYPE = "Draflow-Type"


class _Body(msgspec.Struct, frozen=True, kw_only=True):
    pending: list[str]  # saga ids (the subject's last token)


def pending_after(pending: set[str], heads: list[tuple[str, str]]) -> set[str]:
    """The unfinished sagas once ``heads`` ((saga id, event type) in log order) came after a
    position where ``pending`` were the unfinished ones (pure)."""
    out = set(pending)
    for saga_id, type_ in heads:
        if type_ in TERMINAL_SAGA_EVENTS:
            out.discard(saga_id)
        else:
            out.add(saga_id)
    return out


class PendingSagas:
    """The unfinished sagas under ``prefix`` (``<root>.ev.Saga._.``), and their snapshot."""

    def __init__(self, store: EventStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix
        self.read = 0  # saga events (or heads) read by the last ``find``: the work it did
        self.load = SnapshotPolicy.from_env().load  # DRAFLOW_SNAPSHOT_LOAD=0: always the whole scan

    async def find(self) -> list[str]:
        """The saga ids unfinished at the log's end (a superset: a saga finishing meanwhile may
        be in it; the caller loads each before running it). Stores the set found."""
        events = self.store
        end = await events.stream_last_seq()
        loaded = None
        if self.load:
            loaded = await load_snapshot(events.snapshots, SNAPSHOT, SCHEMA, events.identity, end)
        body: _Body | None = None
        if loaded is not None:
            try:
                body = msgspec.json.decode(loaded.body, type=_Body)
            except msgspec.DecodeError as exc:
                log.warning("snapshot %s at %d ignored: %s", SNAPSHOT, loaded.header.position, exc)
        self.read = 0
        if loaded is not None and body is not None:
            heads: list[tuple[str, str]] = []
            async for records in events.read_raw(f"{self.prefix}*", loaded.header.position + 1):
                heads += [(r.subject[len(self.prefix) :], r.header(HDR_TYPE) or "") for r in records]
            self.read = len(heads)
            pending = pending_after(set(body.pending), heads)
        else:
            # every saga's last event: what a start did before snapshots (it reads at least up
            # to ``end``, so the set is complete up to there)
            pending = set()
            async for records in events.last_per_subject(f"{self.prefix}*"):
                self.read += len(records)
                pending = pending_after(
                    pending, [(r.subject[len(self.prefix) :], r.header(HDR_TYPE) or "") for r in records]
                )
        await self._save(end, pending)
        return sorted(pending)

    async def _save(self, position: int, pending: set[str]) -> None:
        """Store the set as complete up to ``position`` (a failure is a log line: the next start
        reads more, nothing is lost)."""
        identity = self.store.identity
        if not identity:
            return
        body = msgspec.json.encode(_Body(pending=sorted(pending)))
        try:
            await self.store.snapshots.save(SNAPSHOT, SCHEMA, position, identity, body)
        except Exception as exc:  # no snapshot stream, no permission, a timeout
            log.warning("snapshot %s at %d not written: %r", SNAPSHOT, position, exc)
