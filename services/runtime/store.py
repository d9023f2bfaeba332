"""The object cache: every object in memory, rebuilt from the log and kept current.

The apiserver serves from it; every controller's runtime (``draflow.services.runtime.controller``) reads
from its own copy (client-go's informer cache, fed by the log instead of a watch).

At start the whole log is folded into an :class:`ObjectIndex`; a :class:`Tail` then follows the
stream, so events appended directly by controllers (``ClaimAllocated`` on a claim's subject) show
up here too. The apiserver's own appends are folded in as soon as JetStream acknowledges them
(read-your-writes); the copy that arrives from the log later is ignored by the index's version
check. ``position`` is the stream sequence up to which the log has been folded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from draflow.events.api.codec import object_meta
from draflow.events.api.registry import resource_types
from draflow.events.codec import DecodeError, decode
from draflow.events.envelope import Event
from draflow.events.objects import EVENT_KIND
from draflow.events.subjects import parse_subject
from draflow.infra import tracing
from draflow.infra.errors import ConcurrencyError
from draflow.infra.eventstore import AppendRequest, EventStore, RawRecord, StreamReset
from draflow.infra.snapshots import SnapshotPolicy, Snapshotter
from draflow.projections.objects import Change, ObjectIndex
from draflow.projections.snapshot import OBJECTS, encode_index, schema
from draflow.services.runtime.crds import CRD_KIND, is_custom_kind, on_crd_change
from draflow.services.runtime.protocol import StatusError
from draflow.services.runtime.snapshot_start import load_objects
from draflow.services.runtime.tail import Tail

__all__ = ["ApiStore"]

log = logging.getLogger(__name__)

Listener = Callable[[str, str, str, Change], None]  # (kind, namespace, name, change)
PositionListener = Callable[[int], None]  # (the new position)
LINKED_KINDS = frozenset({"Pod"})  # writes from another trace link to the trace of the creation


class ApiStore:
    def __init__(
        self, events: EventStore, *, snapshot_writer: bool = False, policy: SnapshotPolicy | None = None
    ) -> None:
        """``snapshot_writer``: this process writes the object fold's snapshots (the apiserver and
        the claim controller do); every store starts from the newest one it finds."""
        self.events = events
        self.root = events.root
        self.index = ObjectIndex()
        self._kinds = frozenset(rt.kind for rt in resource_types()) | {EVENT_KIND}
        self.position = 0
        self._advanced = asyncio.Event()
        self._listeners: list[Listener] = []
        self._position_listeners: list[PositionListener] = []
        self._tail = Tail(events, f"{self.root}.ev.>", 1)
        self._task: asyncio.Task[None] | None = None
        # (kind, namespace, name) -> the traceparent of the object's creation (LINKED_KINDS only)
        self._creation_traces: dict[tuple[str, str, str], str] = {}
        self.policy = policy or SnapshotPolicy.from_env()
        self.snapshot_position = 0  # the position of the snapshot this store started from (0: none)
        self.snapshotter = Snapshotter(
            events.snapshots,
            OBJECTS,
            schema(),
            lambda: events.identity,
            self._capture,
            lambda: self.position,
            self.policy if snapshot_writer else SnapshotPolicy(every_events=0, every_s=0),
            size=self.index.size,
        )

    def _capture(self) -> tuple[int, Callable[[], bytes]] | None:
        objects, versions = self.index.image()
        return self.position, lambda: encode_index(objects, versions)

    async def restore(self, last_seq: int) -> bool:
        """Start from the newest valid snapshot of the object fold: the index it holds, its
        position, and every object told to the listeners as ADDED (what they would have seen
        folding the log). False when there is none to use."""
        if self.position or not self.policy.load:
            return False
        loaded = await load_objects(self.events, last_seq)
        if loaded is None:
            return False
        position, index = loaded
        self.index.adopt(index)
        self.position = self.snapshot_position = self.snapshotter.saved_at = position
        self.index.settle(position)
        # CRDs first: a custom kind is served (and its objects folded) once its CRD is known
        for kind in sorted(index.kinds(), key=lambda k: k != CRD_KIND):
            for obj in index.items(kind):
                meta = object_meta(obj)
                ns, name = meta.namespace or "", meta.name
                self._notify(kind, ns, name, Change("ADDED", obj, index.version(kind, ns, name)))
        return True

    def listen(self, listener: Listener) -> None:
        """Call ``listener`` for every change, from the log or from this process's appends."""
        self._listeners.append(listener)

    def listen_position(self, listener: PositionListener) -> None:
        """Call ``listener`` each time ``position`` moves on: every change up to it was notified
        (changes of this process's own appends may be notified before the log reaches them)."""
        self._position_listeners.append(listener)

    async def start(self, timeout_s: float = 120.0) -> None:
        """Fold the log (from where this store is), then keep following it in the background."""
        started = time.monotonic()
        target = await self.events.stream_last_seq(wait_s=timeout_s)
        restored = await self.restore(target)
        self._tail = Tail(self.events, f"{self.root}.ev.>", self.position + 1)
        self._task = asyncio.create_task(self._follow(), name="apiserver-follow")
        await self.wait_position(target, timeout_s)
        log.info(
            "%s: caught up with the log at %d in %.3fs (%s)",
            self.events.actor,
            self.position,
            time.monotonic() - started,
            f"from the snapshot at {self.snapshot_position}" if restored else "folded from the start",
        )
        self.snapshotter.start()

    async def stop(self) -> None:
        await self.snapshotter.stop()
        await self._tail.stop()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=2.0)  # honcho kills 5 s after SIGTERM
            if not done:
                log.warning("the log follower did not stop within 2s")

    async def _follow(self) -> None:
        while not self._tail.stopped:
            try:
                async for records in self._tail.batches():
                    for rec in records:
                        try:
                            self._apply_record(rec)
                        except Exception:  # a reducer bug must not stop the store from following
                            log.exception("cannot fold event %d on %s", rec.seq, rec.subject)
                    self.position = records[-1].seq
                    self.index.settle(self.position)
                    for position_listener in self._position_listeners:
                        position_listener(self.position)
                    self._advanced.set()
                    self._advanced = asyncio.Event()
            except StreamReset:
                # everything folded belongs to a log that is gone: stop following (the service
                # runner sees the reset on the event store and stops or rebuilds the service)
                raise
            except Exception:  # e.g. the connection closed under us: resume where we were
                log.exception("following the log failed; resuming at %d", self._tail.next_seq)
                await asyncio.sleep(0.5)

    def _apply_record(self, rec: RawRecord) -> None:
        try:
            kind, ns, name = parse_subject(rec.subject, self.root)
        except ValueError:
            return  # not an object subject
        if kind not in self._kinds and not is_custom_kind(kind):
            return  # sagas and other aggregates share the stream; only objects are served
        namespace = ns or ""
        try:
            env = decode(rec.data, rec.seq)
        except DecodeError as exc:
            log.warning(
                "event %d on %s: %s (object version moved, content ignored)", rec.seq, rec.subject, exc
            )
            change = self.index.touch(kind, namespace, name, rec.seq)
        else:
            change = self.index.apply_envelope(kind, namespace, name, env)
            self._remember_trace(kind, namespace, name, env.traceparent)
        if change is not None:
            self._notify(kind, namespace, name, change)

    def _remember_trace(self, kind: str, namespace: str, name: str, traceparent: str) -> None:
        """The traceparent of a pod's first traced event (its creation): later writes by another
        trace (a re-apply, a delete) link to it, so a trace viewer leads from one to the other."""
        if kind not in LINKED_KINDS:
            return
        key = (kind, namespace, name)
        if self.index.get(kind, namespace, name) is None:
            self._creation_traces.pop(key, None)
        elif traceparent:
            self._creation_traces.setdefault(key, traceparent)

    def creation_trace(self, kind: str, namespace: str, name: str) -> str:
        """The traceparent the object's creation carried ("" when unknown or untraced)."""
        return self._creation_traces.get((kind, namespace, name), "")

    def _links(self, kind: str, namespace: str, name: str) -> tuple[str, ...]:
        created = self.creation_trace(kind, namespace, name)
        if not created or not tracing.enabled():
            return ()
        current = tracing.current_traceparent()
        same = current and current.split("-")[1:2] == created.split("-")[1:2]
        return () if same else (created,)

    def _notify(self, kind: str, namespace: str, name: str, change: Change) -> None:
        if kind == CRD_KIND:  # its kind is served (or not) before anyone hears of the change
            on_crd_change(change)
        for listener in self._listeners:
            listener(kind, namespace, name, change)

    async def wait_position(self, seq: int, timeout_s: float = 10.0) -> None:
        """Return once every event up to ``seq`` is folded (TimeoutError otherwise)."""
        async with asyncio.timeout(timeout_s):
            while self.position < seq:
                advanced = self._advanced
                self._tail.wake()
                await advanced.wait()

    async def sync(self, kind: str, namespace: str, name: str, timeout_s: float = 10.0) -> None:
        """Catch up with one object's subject (after a conflict: someone else appended)."""
        last = await self.events.last_seq(self.subject(kind, namespace, name))
        if self.index.version(kind, namespace, name) < last:
            await self.wait_position(last, timeout_s)

    def subject(self, kind: str, namespace: str, name: str) -> str:
        """The object's subject; a name that cannot be one (validation normally refuses it first)
        is a 400 for the client, not a crash."""
        try:
            return self.events.subject(kind, namespace or None, name)
        except ValueError as exc:
            raise StatusError.of(
                400, "BadRequest", f"{kind} {namespace}/{name}: invalid name: {exc}"
            ) from None

    async def append(
        self,
        kind: str,
        namespace: str,
        name: str,
        events: Sequence[Event],
        *,
        expected_last_seq: int | None = None,
        unchecked: bool = False,
        msg_id: str | None = None,
        correlation_id: str = "",
        actor: str | None = None,
    ) -> int:
        """Append to the object's subject and fold; returns the new resourceVersion (a sequence).

        Optimistic on the version this store holds (or ``expected_last_seq``): raises the event
        store's ConcurrencyError when the subject moved on. ``unchecked`` appends without the
        check (events whose reducers commute, like Kubernetes Event counts) and waits for the
        log to deliver them instead of folding locally, so nothing in between is skipped.
        """
        expected = (
            None
            if unchecked
            else (
                self.index.version(kind, namespace, name) if expected_last_seq is None else expected_last_seq
            )
        )
        subject = self.subject(kind, namespace, name)
        links = self._links(kind, namespace, name) if actor is None else ()
        for attempt in (1, 2):
            try:
                seqs = await self.events.append(
                    subject,
                    events,
                    expected_last_seq=expected,
                    msg_id=msg_id,
                    correlation_id=correlation_id,
                    actor=actor,
                    links=links,
                )
                break
            except ConcurrencyError:
                recreated = await self._recreated_version(kind, namespace, name, expected)
                if attempt == 2 or recreated is None:
                    raise
                expected = recreated
        if unchecked:
            await self.wait_position(seqs[-1])
            return seqs[-1]
        self.fold_appended(kind, namespace, name, events, seqs)
        return seqs[-1]

    async def _recreated_version(
        self, kind: str, namespace: str, name: str, expected: int | None
    ) -> int | None:
        """A create (expected 0) refused because the name had a life before: the subject's last
        sequence, read from the log, when that life is over in this fold (the name's tombstone was
        settled away: the fold is past its last event and holds no object). None: a real conflict."""
        if expected != 0 or self.index.get(kind, namespace, name) is not None:
            return None
        last = await self.events.last_seq(self.subject(kind, namespace, name))
        if 0 < last <= self.position and self.index.get(kind, namespace, name) is None:
            return last
        return None

    def fold_appended(
        self, kind: str, namespace: str, name: str, events: Sequence[Event], seqs: Sequence[int]
    ) -> None:
        """Fold events this process got appended (at ``seqs``) before the log delivers them."""
        for ev, seq in zip(events, seqs, strict=True):
            change = self.index.apply(kind, namespace, name, type(ev).type_name(), ev, seq)
            if change is not None:
                self._notify(kind, namespace, name, change)

    async def append_many(
        self, requests: Sequence[tuple[str, str, str, Sequence[Event], int]]
    ) -> list[int | BaseException]:
        """Pipelined appends of (kind, namespace, name, events, expected_last_seq), each folded
        on success; per request the new resourceVersion or the exception (ConcurrencyError...)."""
        if not requests:
            return []
        appends = [
            AppendRequest(self.subject(kind, ns, name), evs, expected)
            for kind, ns, name, evs, expected in requests
        ]
        outcomes = await self.events.append_many(appends, return_exceptions=True)
        for i, ((kind, ns, name, evs, expected), outcome) in enumerate(zip(requests, outcomes, strict=True)):
            if isinstance(outcome, ConcurrencyError):
                recreated = await self._recreated_version(kind, ns, name, expected)
                if recreated is not None:
                    outcomes[i] = (
                        await self.events.append_many(
                            [AppendRequest(appends[i].subject, evs, recreated)], return_exceptions=True
                        )
                    )[0]
        out: list[int | BaseException] = []
        for (kind, ns, name, evs, _), outcome in zip(requests, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                out.append(outcome)
            else:
                self.fold_appended(kind, ns, name, evs, outcome)
                out.append(outcome[-1])
        return out
