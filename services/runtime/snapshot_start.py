"""Starting a fold from the newest snapshot of the object fold (every process that folds objects).

The apiserver and the claim controller write the snapshots (``ApiStore``); the apiserver's and
controllers' stores, the scheduler's view and the quota reconciler read them, each keeping the
kinds it folds. One place loads and decodes, so every reader skips the same bad snapshots with
the same log lines.
"""

from __future__ import annotations

import asyncio
import logging

from draflow.infra.eventstore import EventStore
from draflow.infra.snapshots import load_snapshot
from draflow.projections.objects import ObjectIndex
from draflow.projections.snapshot import OBJECTS, SnapshotDecodeError, decode_index, schema

__all__ = ["load_objects"]

log = logging.getLogger(__name__)


async def load_objects(
    events: EventStore, last_seq: int, kinds: frozenset[str] | None = None
) -> tuple[int, ObjectIndex] | None:
    """The newest usable snapshot of the object fold at or before ``last_seq``: its position and
    its index (only ``kinds`` when given). None: there is none to use (fold from the start)."""
    loaded = await load_snapshot(events.snapshots, OBJECTS, schema(), events.identity, last_seq)
    if loaded is None:
        return None
    try:
        index = await asyncio.to_thread(decode_index, loaded.body, kinds)
    except SnapshotDecodeError as exc:
        log.warning("snapshot %s at %d ignored: %s", OBJECTS, loaded.header.position, exc)
        return None
    return loaded.header.position, index
