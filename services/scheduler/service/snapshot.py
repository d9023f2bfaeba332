"""The scheduler's view of the cluster: the log folded into objects, fed to the scheduling core.

One ordered reader follows every event of the stream (``<root>.ev.>``, batched direct gets, no
consumer state: the scheduler's hot state is rebuilt from the log at start, as DESIGN.md asks).
Events on the subjects of the kinds the scheduler reads (nodes, pods, claims, classes, slices,
taint rules) are folded with the shared object fold (:mod:`draflow.projections.objects`, extended by
:mod:`draflow.projections.dra`) into an :class:`ObjectIndex`; each resulting change goes to the core
(``observe`` / ``observe_deleted``), which updates the cluster snapshot and hands the queue its
requeue hints. Classic claims (KEP-3063) go to the classic plugin's feed instead
(:mod:`draflow.services.scheduler.plugins.classic.feed`); classes, node capacity, classic claims,
capacity ledgers and vendor parameter objects of any other kind also to the numeric plugin's feed
(KEP-4381, :mod:`draflow.services.scheduler.plugins.numeric.feed`). Other subjects (sagas,
Kubernetes Events) are skipped before decoding. ``position`` is the last stream sequence applied:
the snapshot a decision was made on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import object_meta
from draflow.events.api.resource_v1 import AllocationResult, ResourceClaim
from draflow.events.codec import DecodeError, decode
from draflow.events.guard import GUARD_KIND, GuardTaken
from draflow.events.subjects import aggregate_subject, decode_token
from draflow.infra.eventstore import EventStore, RawRecord, StreamReset
from draflow.infra.guard import guard_prefix
from draflow.infra.snapshots import SnapshotPolicy
from draflow.projections.objects import ObjectIndex, fold
from draflow.projections.snapshot import OBJECTS
from draflow.services.dra.numeric.claims import is_numeric_class
from draflow.services.dra.numeric.plans import LEDGER_KIND
from draflow.services.runtime.snapshot_start import load_objects
from draflow.services.runtime.tail import Tail
from draflow.services.scheduler.framework import Scheduler
from draflow.services.scheduler.plugins.classic.feed import CLASSIC_KINDS, ClassicFeed
from draflow.services.scheduler.plugins.numeric.feed import NUMERIC_KINDS, NumericFeed
from draflow.services.scheduler.sagas.guarded import GuardStamp, stamps
from draflow.services.scheduler.service.guard_heads import GuardHeads

__all__ = ["KINDS", "Snapshot"]

# what the core learns first when it starts from a snapshot: the devices, then what uses them
_RESTORE_ORDER = ("DeviceClass", "Node", "ResourceSlice", "DeviceTaintRule", "ResourceClaim", "Pod")

log = logging.getLogger(__name__)

_CLAIM_HOLDER = "ResourceClaim "  # how a guard message names a claim (draflow.services.dra.guards)

KINDS = (
    frozenset({"Node", "Pod", "ResourceClaim", "DeviceClass", "ResourceSlice", "DeviceTaintRule"})
    | CLASSIC_KINDS
)


class Snapshot:
    """Objects the scheduler reads, kept current from the log and mirrored into ``core``."""

    def __init__(self, store: EventStore, core: Scheduler) -> None:
        self.store = store
        self.core = core
        self.index = ObjectIndex()
        self.position = 0
        self._prefix = f"{store.root}.ev."
        self._tail: Tail | None = None
        self._task: asyncio.Task[None] | None = None
        self._advanced = asyncio.Event()
        self.on_batch: Callable[[], None] | None = None  # the service's wake-up for its loop
        self.classic = ClassicFeed(store, core, self.wake)  # classic claims: the KEP-3063 plugin
        # KEP-4381: classes, node capacity, numeric claims, ledgers and vendor parameter objects
        self.numeric = NumericFeed(store, core, self.wake)
        # (namespace, name) -> the traceparent of the pod's first event (its apply): the pod's
        # PodScheduling saga continues that trace, so one pod flow is one trace
        self._traceparents: dict[tuple[str, str], str] = {}
        self.snapshot_position = 0  # the position of the snapshot this view started from (0: none)
        self.policy = SnapshotPolicy.from_env()  # its `load`: whether a start looks for a snapshot
        # guard subject -> the version a decision expects there (its last sequence, held back
        # before a take whose allocation the snapshot does not have yet)
        self.guard_heads = GuardHeads(
            store.root, lambda driver, pool: self.core.cluster.pool_slices(driver, pool)
        )

    def stamp(self, allocation: AllocationResult) -> tuple[GuardStamp, ...]:
        """The guards ``allocation`` takes, at the versions this snapshot has applied."""
        return stamps(self.core, allocation, self.guard_heads, self.store.root)

    def traceparent(self, namespace: str, name: str) -> str:
        return self._traceparents.get((namespace, name), "")

    # -- reading objects -----------------------------------------------------------------------------
    def get(self, kind: str, namespace: str, name: str) -> tuple[ApiStruct | None, int]:
        """The object as this snapshot has it and its version (0: no event seen)."""
        return self.index.get(kind, namespace, name), self.index.version(kind, namespace, name)

    async def load(self, kind: str, namespace: str, name: str) -> tuple[ApiStruct | None, int]:
        """The object as the log has it now (after a conflict: the snapshot may lag)."""
        subject = aggregate_subject(kind, namespace or None, name, self.store.root)
        loaded = await self.store.load(subject, lambda s, env: fold(s, env.type, env.data, env.seq), None)
        return loaded.state, loaded.version

    # -- following the log ---------------------------------------------------------------------------
    async def start(self, timeout_s: float = 300.0) -> None:
        """Fold the log up to its current end, then keep following it in the background."""
        started = time.monotonic()
        target = await self.store.stream_last_seq(wait_s=timeout_s)
        restored = await self.restore(target)
        self._tail = Tail(self.store, f"{self.store.root}.ev.>", self.position + 1, idle_poll_s=0.5)
        self._task = asyncio.create_task(self._follow(), name="scheduler-snapshot")
        await self.wait_position(target, timeout_s)
        log.info(
            "%s: caught up with the log at %d in %.3fs (%s)",
            self.store.actor,
            self.position,
            time.monotonic() - started,
            f"from the snapshot at {self.snapshot_position}" if restored else "folded from the start",
        )

    async def restore(self, last_seq: int) -> bool:
        """Start from the newest valid snapshot of the object fold (the apiserver and the claim
        controller write them): its objects of the scheduler's kinds, handed to the core as if
        the log had just created them (devices first, pods last). False when there is none.
        Pods restored this way start a new trace (a snapshot keeps objects, not envelopes)."""
        if self.position or not self.policy.load:
            return False
        loaded = await load_objects(self.store, last_seq, KINDS | NUMERIC_KINDS)
        if loaded is None:
            return False
        position, index = loaded
        if any(is_numeric_class(c) for c in index.items(cv.CLASS_KIND) if isinstance(c, cv.ResourceClass)):
            # KEP-4381: numeric claims read parameter objects of any kind (CRDs), which this
            # scheduler's kind filter does not keep: fold the log from the start instead
            log.info("snapshot %s at %d not used: numeric classes exist", OBJECTS, position)
            return False
        self.index.adopt(index)
        self.position = self.snapshot_position = position
        self.index.settle(position)
        await self._restore_guard_heads(position)
        order = {k: i for i, k in enumerate(_RESTORE_ORDER)}
        for kind in sorted(index.kinds(), key=lambda k: order.get(k, len(order))):
            for obj in index.items(kind):
                meta = object_meta(obj)
                if self.numeric.wants(kind):
                    version = index.version(kind, meta.namespace or "", meta.name)
                    self.numeric.apply(kind, meta.namespace or "", meta.name, obj, version)
                if kind in CLASSIC_KINDS:
                    self.classic.apply(kind, meta.namespace or "", meta.name, obj)
                elif kind in KINDS:
                    self.core.observe(obj)
        self.numeric.restore_ledgers(index)
        return True

    async def _restore_guard_heads(self, position: int) -> None:
        """The guards' versions at ``position`` (a snapshot keeps objects, not guard subjects):
        the last message of each guard subject, where it is at or before ``position``; the tail
        brings the others, which moved after it. A take whose claim changed after it may have
        been backed by an allocation and freed since (a deallocation writes no guard message):
        the claim's log says whether the live fold would have settled it."""
        async for records in self.store.last_per_subject(f"{guard_prefix(self.store.root)}>"):
            for rec in records:
                if rec.seq <= position:
                    event, claim, gone = self._guard_holder(rec, rec.subject)
                    settled = gone
                    if isinstance(event, GuardTaken) and claim is not None:
                        settled = await self._backed_since(claim, rec.seq, position, rec.subject)
                    self.guard_heads.apply(rec.subject, rec.seq, event, claim, settled=settled)

    async def _backed_since(self, claim: ResourceClaim, take_seq: int, position: int, subject: str) -> bool:
        """Whether ``claim``'s log shows it allocated with the guard of ``subject`` at some point
        after ``take_seq`` (up to ``position``): the live fold settled the take then. Read only
        when the claim changed after the take and does not back it now (freed since, or still on
        its way)."""
        meta = claim.metadata
        version = self.index.version("ResourceClaim", meta.namespace, meta.name)
        if version <= take_seq or self.guard_heads.backs(claim, meta.uid, subject):
            return False  # unchanged since the take, or backing it as it is: apply decides
        state: object = None
        claim_subject = aggregate_subject("ResourceClaim", meta.namespace, meta.name, self.store.root)
        for env in await self.store.events(claim_subject):
            if env.seq > position:
                break
            state = fold(state, env.type, env.data, env.seq)
            if env.seq > take_seq and self.guard_heads.backs(
                state if isinstance(state, ResourceClaim) else None, meta.uid, subject
            ):
                return True
        return False

    def _guard_holder(self, rec: RawRecord, subject: str) -> tuple[object, ResourceClaim | None, bool]:
        """A guard message's event, the take's claim as this snapshot has it, and whether that
        claim is gone (deleted, or another uid under its name): no allocation can back it now."""
        try:
            event: object = decode(rec.data, rec.seq).data
        except DecodeError as exc:
            log.warning("event %d on %s: %s (ignored)", rec.seq, subject, exc)
            return None, None, False
        if not (isinstance(event, GuardTaken) and event.holder.startswith(_CLAIM_HOLDER)):
            return event, None, False
        namespace, _, name = event.holder[len(_CLAIM_HOLDER) :].partition("/")
        obj = self.index.get("ResourceClaim", namespace, name)
        if not isinstance(obj, ResourceClaim):
            return event, None, True
        if event.holder_uid and obj.metadata.uid != event.holder_uid:
            return event, None, True
        return event, obj, False

    def _apply_guard(self, rec: RawRecord, subject: str) -> None:
        """A guard message: the guard's version, and whether a take's allocation is in yet."""
        event, claim, gone = self._guard_holder(rec, subject)
        self.guard_heads.apply(subject, rec.seq, event, claim, settled=gone)

    async def stop(self) -> None:
        if self._tail is not None:
            await self._tail.stop()
        await self.classic.stop()
        await self.numeric.stop()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def wake(self) -> None:
        """Read now: something was just appended (our own saga step, say)."""
        if self._tail is not None:
            self._tail.wake()

    async def wait_position(self, seq: int, timeout_s: float = 10.0) -> None:
        async with asyncio.timeout(timeout_s):
            while self.position < seq:
                await self._advanced.wait()

    async def _follow(self) -> None:
        assert self._tail is not None
        while not self._tail.stopped:
            try:
                async for records in self._tail.batches():
                    self.apply_records(records)
            except (asyncio.CancelledError, StreamReset):
                raise  # a reset stops the follower; the service runner stops the service
            except Exception:  # e.g. the connection dropped: resume where we were
                log.exception("following the log failed; resuming at %d", self._tail.next_seq)
                await asyncio.sleep(0.5)

    def apply_records(self, records: list[RawRecord]) -> None:
        """Fold a batch into the index and the core (synchronous: no cycle runs in between)."""
        prefix, plen = self._prefix, len(self._prefix)
        for rec in records:
            subject = rec.subject
            if not subject.startswith(prefix):
                continue
            parts = subject[plen:].split(".")
            if len(parts) != 3:
                continue
            kind = parts[0]
            if kind == GUARD_KIND:  # the guards' versions a decision expects
                self._apply_guard(rec, subject)
                continue
            numeric = self.numeric.wants(kind)
            if kind not in KINDS and not numeric:
                continue
            namespace = "" if parts[1] == "_" else decode_token(parts[1])
            name = decode_token(parts[2])
            try:
                env = decode(rec.data, rec.seq)
            except DecodeError as exc:
                log.warning("event %d on %s: %s (ignored)", rec.seq, subject, exc)
                self.index.touch(kind, namespace, name, rec.seq)
                continue
            try:
                change = self.index.apply_envelope(kind, namespace, name, env)
                if numeric:
                    obj = None if change is None or change.type == "DELETED" else change.object
                    if change is not None or kind == LEDGER_KIND:
                        self.numeric.apply(kind, namespace, name, obj, rec.seq)
                if change is None:
                    continue
                if kind in CLASSIC_KINDS:
                    obj = None if change.type == "DELETED" else change.object
                    self.classic.apply(kind, namespace, name, obj)
                    continue
                if kind == "Pod":
                    if change.type == "ADDED" and env.traceparent:
                        self._traceparents[(namespace, name)] = env.traceparent
                    elif change.type == "DELETED":
                        self._traceparents.pop((namespace, name), None)
                if change.type == "DELETED":
                    self.core.observe_deleted(kind, namespace, name)
                    if kind == "ResourceClaim" and isinstance(change.object, ResourceClaim):
                        self.guard_heads.claim_deleted(change.object.metadata.uid)
                else:
                    self.core.observe(change.object)
                    if kind == "ResourceClaim" and isinstance(change.object, ResourceClaim):
                        self.guard_heads.claim_changed(change.object)
            except Exception:  # a bug on one object must not stop the scheduler from following
                log.exception("cannot apply event %d on %s", rec.seq, subject)
        if records:
            self.position = max(self.position, records[-1].seq)
            self.index.settle(self.position)
            self._advanced.set()
            self._advanced = asyncio.Event()
            if self.on_batch is not None:
                self.on_batch()
