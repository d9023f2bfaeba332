"""Long logs for the history tests: the recorded golden log published (again) into a real stream,
a snapshot of the object fold at a position (as the apiserver writes one), and a whole read."""

from __future__ import annotations

import json

from draflow.infra.eventstore import EventStore
from draflow.services.runtime.archiving import Retention
from draflow.services.runtime.store import ApiStore
from tests.paths import GOLDEN

__all__ = ["EVERYTHING_OLD", "LINES", "everything", "publish", "snapshot_at"]

LINES = (GOLDEN / "basic-claim-template.jsonl").read_text().splitlines()[1:]
EVERYTHING_OLD = Retention(older_than_s=1e-6)  # every stored event is older than this


async def publish(store: EventStore, lines: list[str], copy: int = 0) -> None:
    """The recorded events again (``copy`` > 0: under new ids, so they are not de-duplicated)."""
    for line in lines:
        rec = json.loads(line)
        subject = store.root + rec["subject"][len("draflow") :]
        env = dict(rec["envelope"], subject=subject)
        headers = dict(rec["headers"])
        if copy:
            headers["Nats-Msg-Id"] = f"{headers['Nats-Msg-Id']}~{copy}"
        await store.js.publish(subject, json.dumps(env).encode(), headers=headers)


async def snapshot_at(events: EventStore, position: int) -> None:
    """Write the object fold's snapshot at the log's end, which must be ``position``."""
    writer = ApiStore(events, snapshot_writer=True)
    await writer.start(timeout_s=30)
    try:
        assert await writer.snapshotter.save_now() == position
    finally:
        await writer.stop()


async def everything(events: EventStore, subject: str | None = None) -> list[tuple[int, str, bytes]]:
    """(sequence, subject, payload) of every event matching ``subject`` (all: None), from 1."""
    out = []
    async for records in events.read_raw(subject, 1):
        out += [(r.seq, r.subject, r.data) for r in records]
    return out
