"""The quota-reconciler service: follows the log, keeps ``QuotaState``, writes ResourceQuota status.

It folds the object events quota depends on (DeviceClass, Pod, ResourceClaim, ResourceQuota) into
an ``ObjectIndex`` and a ``QuotaState``: nothing of its own is kept between runs. A start takes
those kinds from the newest snapshot of the object fold (written by the apiserver and the claim
controller), rebuilds the usage from them, and folds only the log after it; without one it
replays the log from sequence 1. Either way it arrives at the same usage (the reducer has no
counters). Only once
the replay has reached the log's end at start does it ``reconcile``, so no stale intermediate
status is ever written; after that it reconciles after every batch. Each changed quota is written
through the apiserver's status verb with the quota's resourceVersion (optimistic concurrency): a
409 means the quota moved on meanwhile, and the newer version, arriving through the log,
triggers the next reconcile. When nothing changed, nothing is appended.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from draflow.events.api.codec import object_meta
from draflow.events.api.core_v1 import ResourceQuota
from draflow.events.codec import DecodeError, decode
from draflow.events.subjects import parse_subject
from draflow.infra.eventstore import EventStore, RawRecord
from draflow.infra.snapshots import SnapshotPolicy
from draflow.projections.objects import Change, ObjectIndex
from draflow.services.dra.quota.state import QuotaState
from draflow.services.quota_reconciler.reconcile import TRACKED, fold_change, reconcile
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import StatusError
from draflow.services.runtime.snapshot_start import load_objects
from draflow.services.runtime.tail import Tail

__all__ = ["ACTOR", "QuotaReconciler"]

ACTOR = "quota-reconciler"
RETRY_S = 1.0

log = logging.getLogger(__name__)


class QuotaReconciler:
    def __init__(self, events: EventStore, api: ApiClient) -> None:
        self.events = events
        self.api = api
        self.index = ObjectIndex()
        self.state = QuotaState()
        self.position = 0  # the stream sequence folded so far
        self.writes = 0  # status writes that appended (for tests and the log)
        self.retry_due = False  # a write failed for want of an apiserver: reconcile again soon
        self._filter = f"{events.root}.ev.>"
        self.policy = SnapshotPolicy.from_env()  # its `load`: whether a start looks for a snapshot
        self.snapshot_position = 0  # the position of the snapshot this run started from (0: none)

    async def restore(self, last_seq: int) -> bool:
        """Start from the newest valid snapshot of the object fold: its objects of the tracked
        kinds, each folded into the usage as if the log had just created it. False: none."""
        if self.position or not self.policy.load:
            return False
        loaded = await load_objects(self.events, last_seq, TRACKED)
        if loaded is None:
            return False
        position, index = loaded
        self.index.adopt(index)
        self.position = self.snapshot_position = position
        self.index.settle(position)
        for kind in sorted(TRACKED):  # usage does not depend on the order objects arrive in
            for obj in index.items(kind):
                meta = object_meta(obj)
                ns, name = meta.namespace or "", meta.name
                fold_change(self.state, kind, ns, name, Change("ADDED", obj, index.version(kind, ns, name)))
        return True

    def fold(self, records: list[RawRecord]) -> None:
        for rec in records:
            try:
                kind, ns, name = parse_subject(rec.subject, self.events.root)
            except ValueError:
                continue
            if kind not in TRACKED:
                continue
            namespace = ns or ""
            try:
                env = decode(rec.data, rec.seq)
            except DecodeError as exc:
                log.warning("event %d on %s: %s (version moved, content ignored)", rec.seq, rec.subject, exc)
                self.index.touch(kind, namespace, name, rec.seq)
                continue
            change = self.index.apply_envelope(kind, namespace, name, env)
            if change is not None:
                fold_change(self.state, kind, namespace, name, change)
        if records:
            self.position = records[-1].seq
            self.index.settle(self.position)

    async def write_statuses(self) -> int:
        """Write every quota status ``reconcile`` says changed; returns how many were written."""
        written = 0
        self.retry_due = False
        for quota in reconcile(self.state):
            meta = quota.metadata
            stored = self.index.get(ResourceQuota.KIND, meta.namespace, meta.name)
            rv = object_meta(stored).resource_version if stored is not None else meta.resource_version
            try:
                await self.api.update_status(
                    ResourceQuota.KIND, meta.name, quota.status, namespace=meta.namespace, resource_version=rv
                )
            except StatusError as exc:
                if exc.status.code in (404, 409):  # gone or moved on: the log brings the news
                    log.info("quota %s/%s: %s", meta.namespace, meta.name, exc.status.message)
                    continue
                if exc.status.code >= 500:  # no apiserver (yet), or it timed out: try again soon
                    log.warning("quota %s/%s: %s; retrying", meta.namespace, meta.name, exc.status.message)
                    self.retry_due = True
                    continue
                raise
            # Until our own status event arrives through the log, do not write it again.
            self.state.apply(quota)
            written += 1
            log.info("quota %s/%s: used %s", meta.namespace, meta.name, dict(quota.status.used))
        self.writes += written
        return written

    async def catch_up(self) -> None:
        """Fold everything stored up to now (reads end at the log's end)."""
        async for records in self.events.read_raw(self._filter, self.position + 1):
            self.fold(records)

    async def run(self, stop: asyncio.Event) -> None:
        """Replay to the log's end, reconcile, then follow and reconcile until ``stop`` is set."""
        started = time.monotonic()
        restored = await self.restore(await self.events.stream_last_seq(wait_s=120.0))
        await self.catch_up()
        log.info(
            "%s: caught up with the log at %d in %.3fs (%s)",
            ACTOR,
            self.position,
            time.monotonic() - started,
            f"from the snapshot at {self.snapshot_position}" if restored else "folded from the start",
        )
        await self.write_statuses()
        tail = Tail(self.events, self._filter, self.position + 1)
        stopping = asyncio.create_task(stop.wait())
        batches = tail.batches()
        nxt: asyncio.Future[list[RawRecord]] | None = None
        try:
            while not stop.is_set():
                if nxt is None:
                    nxt = asyncio.ensure_future(anext(batches))
                timeout = RETRY_S if self.retry_due else None
                waiters: set[asyncio.Future[Any]] = {nxt, stopping}
                await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if stop.is_set():
                    break
                if nxt.done():
                    self.fold(nxt.result())
                    nxt = None
                await self.write_statuses()
        finally:
            if nxt is not None:
                nxt.cancel()
                await asyncio.gather(nxt, return_exceptions=True)
            stopping.cancel()
            await tail.stop()
