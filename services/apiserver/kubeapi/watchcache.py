"""The watch cache: the log's recent object changes, released in order to feeds of watchers.

The cache keeps the last ``capacity`` object changes the apiserver's store folded, in stream
order, each with the object before it (so a label-selected watch sees an object that stops
matching as DELETED and one that starts matching as ADDED, as upstream). A change is released to
watchers once the store's log position has reached it: the apiserver folds its own appends before
the log delivers them, and a watcher must never see sequence 105 before 103.

Watchers are grouped by what they are sent: one ``Feed`` per (kind, namespace, version, format,
label selector, field selector). A released change is offered to each feed once, its selectors
are evaluated once per feed, and its event line is built once per (change, event type, version,
format) for every feed and watcher; at a wake-up each feed joins its lines into one HTTP chunk
that every caught-up watcher of the feed is sent as is (one write each, no task switch). The cost
a watcher adds is that write, not an encoding, a selector or a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec
from msgspec.structs import replace

from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import object_meta
from draflow.projections.objects import Change
from draflow.services.apiserver.kubeapi.encoding import EncodingCache
from draflow.services.apiserver.kubeapi.resources import Resource
from draflow.services.apiserver.kubeapi.tables import table_json
from draflow.services.runtime.store import ApiStore

__all__ = ["Entry", "Feed", "FeedKey", "WatchCache", "Watcher", "event_line"]

BOOKMARK_EVERY_S = 5.0
# watchers are woken together, not before this long after their last writes: the changes released
# meanwhile go out in one write per watcher (one TLS record, one send) instead of one each, and the
# apiserver's own work runs in between; after a quiet window a change goes out at once
COALESCE_S = 0.005
# with many watchers a wake-up's writes cost much CPU (a send per watcher): the next wake-up waits
# ``COST_FACTOR`` times the CPU time the last one took (its thread's, so a preempted wake-up does
# not count the time it waited; the fan-out then takes at most about 1 / (1 + COST_FACTOR) of the
# apiserver's time), never more than ``COALESCE_MAX_S`` (so an event still reaches every watcher
# within the 10 ms the API promises on an unloaded machine)
COST_FACTOR = 8.0
COALESCE_MAX_S = 0.008
_LINES = 4096  # encoded event lines shared by feeds (built at a wake-up, read by its feeds)
MAX_BACKLOG = 50_000  # a watcher this far behind is closed (it lists and watches again)
_encode = msgspec.json.Encoder().encode

Selector = Callable[[ApiStruct], bool]


class Entry(NamedTuple):
    seq: int
    kind: str
    namespace: str
    name: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: ApiStruct
    prev: ApiStruct | None


class FeedKey(NamedTuple):
    """What a watcher is sent: watchers with equal keys are sent equal bytes."""

    kind: str
    namespace: str | None
    version: str
    table: str | None  # a Table watch's includeObject; None for JSON
    labels: str = ""
    fields: str = ""


def event_line(kind: str, obj: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + obj + b"}\n"


@dataclass(eq=False)
class Watcher:
    feed: Feed
    since: int = 0  # changes at or before this version are not this watcher's
    bookmarks: bool = False
    queue: deque[Entry] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    overflowed: bool = False
    bookmark_due: bool = False
    # writes bytes to the connection at once, False when it is closing or backed up; set by the
    # watch's task once its backlog (and a Table's first event, with the columns) is written
    sink: Callable[[bytes], bool] | None = None
    last_write: float = 0.0

    def push(self, entry: Entry) -> None:
        if entry.seq <= self.since:
            return  # released after the watch began, but older than the version it asked for
        if len(self.queue) >= MAX_BACKLOG:
            self.overflowed = True
        else:
            self.queue.append(entry)

    def deliver(self, entries: list[Entry], chunk: bytes) -> None:
        """The feed's released ``entries`` (``chunk``: their HTTP chunk, b"" when none is this
        feed's): written at once when the watcher is caught up, else queued for its task."""
        if self.sink is not None and not self.queue and entries[0].seq > self.since:
            if not chunk or self.sink(chunk):
                return
        for entry in entries:
            self.push(entry)
        if self.queue or self.overflowed:
            self.wake.set()


class Feed:
    """Every watcher of one ``FeedKey``: each change is selected and translated once for all."""

    def __init__(self, cache: WatchCache, key: FeedKey, res: Resource, selected: Selector | None) -> None:
        self.cache, self.key, self.res, self.selected = cache, key, res, selected
        self.watchers: set[Watcher] = set()
        self.pending: list[Entry] = []

    def translate(self, entry: Entry) -> bytes | None:
        """The watch event line of a change for this feed's watchers (None: not theirs)."""
        if self.selected is None:
            return self.cache.line(entry, entry.type, self.key, self.res)
        self.cache.stats["selections"] += 1
        selected = self.selected
        now = entry.type != "DELETED" and selected(entry.obj)
        before = entry.prev is not None and selected(entry.prev)
        if entry.type == "DELETED":
            return self.cache.line(entry, "DELETED", self.key, self.res) if before else None
        if now:
            return self.cache.line(entry, "MODIFIED" if before else "ADDED", self.key, self.res)
        return self.cache.line(entry, "DELETED", self.key, self.res) if before else None

    def chunk(self, entries: list[Entry]) -> bytes:
        lines = [line for line in map(self.translate, entries) if line is not None]
        if not lines:
            return b""
        body = b"".join(lines)
        return b"%x\r\n" % len(body) + body + b"\r\n"

    def sent_position(self) -> int:
        """The newest version a caught-up watcher of this feed has been sent all changes up to:
        a bookmark must not claim changes still waiting for the wake-up."""
        if self.pending:
            return min(self.cache.position, self.pending[0].seq - 1)
        return self.cache.position

    def bookmark(self, position: int, annotations: dict[str, str] | None = None) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(position)}
        if annotations:
            meta["annotations"] = annotations
        obj = {
            "kind": self.res.wire_kind,
            "apiVersion": self.res.api_version(self.key.version),
            "metadata": meta,
        }
        return event_line("BOOKMARK", _encode(obj))


class WatchCache:
    def __init__(
        self,
        store: ApiStore,
        encodings: EncodingCache,
        capacity: int = 100_000,
        bookmark_every_s: float = BOOKMARK_EVERY_S,
        coalesce_s: float = COALESCE_S,
    ) -> None:
        self.store = store
        self.bookmark_every_s = bookmark_every_s
        self.coalesce_s = coalesce_s
        self.coalesce_max_s = COALESCE_MAX_S
        self.encodings = encodings
        self.ring: deque[Entry] = deque()
        self.capacity = capacity
        self.floor = 0  # changes after this sequence are all in the ring
        self.position = 0  # changes up to here are released
        self.latest = 0  # the newest change folded (this process's appends run ahead of the log)
        self._pending: list[Entry] = []
        self._last: dict[tuple[str, str, str], ApiStruct] = {}
        self._feeds: dict[FeedKey, Feed] = {}
        self._by_kind: dict[str, list[Feed]] = {}
        self._started = False
        self._catching_up: asyncio.Future[None] | None = None
        self._lines: dict[tuple[int, str, str, str | None], bytes] = {}
        self._dirty: dict[Feed, None] = {}  # feeds with released changes not yet sent (in order)
        self._flush: asyncio.Handle | None = None
        self._bookmarks: asyncio.Handle | None = None
        self.flushed_at = -1e9
        self.last_cost_s = 0.0  # the CPU time the last wake-up took (its writes, mostly)
        self.closed = asyncio.Event()
        # lines built, selector evaluations, wake-ups, direct writes: what the fan-out costs
        self.stats: Counter[str] = Counter()

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.floor = self.position = self.store.position
        index = self.store.index
        for kind in index.kinds():
            for obj in index.items(kind):
                meta = object_meta(obj)
                self._last[(kind, meta.namespace, meta.name)] = obj
        self.store.listen(self._on_change)
        self.store.listen_position(self._on_position)

    async def stop(self) -> None:
        self.closed.set()
        for handle in (self._flush, self._bookmarks):
            if handle is not None:
                handle.cancel()
        self._flush = self._bookmarks = None
        for feed in self._feeds.values():
            for w in feed.watchers:
                w.wake.set()

    def _on_change(self, kind: str, namespace: str, name: str, change: Change) -> None:
        key = (kind, namespace, name)
        prev = self._last.get(key)
        obj = change.object
        self.latest = max(self.latest, change.seq)
        if change.type == "DELETED":
            self._last.pop(key, None)
            self.encodings.forget(kind, namespace, name)
            # as upstream: the deleted object carries the deletion's version, so a client resuming
            # from the last version it saw does not see the deletion again
            meta = object_meta(obj)
            obj = replace(obj, metadata=replace(meta, resource_version=str(change.seq)))
        else:
            self._last[key] = obj
        self._pending.append(Entry(change.seq, kind, namespace, name, change.type, obj, prev))
        if change.seq <= self.store.position:
            self._on_position(self.store.position)
        elif change.seq == self.position + 1:
            # the very next sequence (this process's own append, the log had nothing in between):
            # nothing can come before it, so it need not wait for the log to deliver it again
            self._on_position(change.seq)
        elif self._catching_up is None:
            # this process's own append, folded before the log delivered it: have the log follower
            # read now rather than at its next wake-up, so the change reaches watchers sooner
            self._catching_up = asyncio.ensure_future(self._catch_up(change.seq))

    async def _catch_up(self, seq: int) -> None:
        try:
            with contextlib.suppress(TimeoutError):
                await self.store.wait_position(seq, 5.0)
        finally:
            self._catching_up = None

    def _on_position(self, position: int) -> None:
        if not self._pending:
            self.position = max(self.position, position)
            return
        ready = [e for e in self._pending if e.seq <= position]
        if not ready:
            return
        self._pending = [e for e in self._pending if e.seq > position]
        ready.sort(key=lambda e: e.seq)
        dirty = self._dirty
        for entry in ready:
            self.ring.append(entry)
            for feed in self._by_kind.get(entry.kind, ()):
                if feed.key.namespace is None or feed.key.namespace == entry.namespace:
                    feed.pending.append(entry)
                    dirty[feed] = None
        while len(self.ring) > self.capacity:
            self.floor = self.ring.popleft().seq
        self.position = max(self.position, position)
        if dirty and self._flush is None:
            loop = asyncio.get_running_loop()
            delay = self.flushed_at + self.window_s() - loop.time()
            if delay <= 0:
                self._flush = loop.call_soon(self._wake)
            else:
                self._flush = loop.call_later(delay, self._wake)

    def _wake(self) -> None:
        """Send every feed's released changes to its watchers, all at once (``COALESCE_S``): one
        chunk per feed, written to each caught-up watcher here; the others' tasks are woken."""
        self._flush = None
        t0 = time.thread_time()
        dirty, self._dirty = self._dirty, {}
        self.stats["wakeups"] += 1
        for feed in dirty:
            entries, feed.pending = feed.pending, []
            if not entries:
                continue
            chunk = feed.chunk(entries)
            for w in feed.watchers:
                w.deliver(entries, chunk)
        self.last_cost_s = time.thread_time() - t0
        self.flushed_at = asyncio.get_running_loop().time()  # and again after each woken one writes

    def window_s(self) -> float:
        """The wait after the last wake-up: ``coalesce_s``, longer when that wake-up took long."""
        return max(self.coalesce_s, min(self.coalesce_max_s, self.last_cost_s * COST_FACTOR))

    def _bookmark_tick(self) -> None:
        """Every ``bookmark_every_s``: a bookmark to each watcher that asked for them and has
        been sent nothing for that long (one timer for all, one encoding per feed)."""
        self._bookmarks = None
        loop = asyncio.get_running_loop()
        now, wanted = loop.time(), False
        for feed in self._feeds.values():
            data = b""
            for w in feed.watchers:
                if not w.bookmarks:
                    continue
                wanted = True
                if now - w.last_write < self.bookmark_every_s:
                    continue
                if w.sink is not None and not w.queue:
                    if not data:
                        line = feed.bookmark(feed.sent_position())
                        data = b"%x\r\n" % len(line) + line + b"\r\n"
                    if w.sink(data):
                        continue
                w.bookmark_due = True
                w.wake.set()
        if wanted and not self.closed.is_set():
            self._bookmarks = loop.call_later(self.bookmark_every_s, self._bookmark_tick)

    async def consistent(self, attempts: int = 3) -> None:
        """Until the store has folded everything up to the newest change it holds: a LIST read
        then is a snapshot at ``store.position`` (its resourceVersion), nothing newer mixed in."""
        for _ in range(attempts):
            target = self.latest
            if target <= self.store.position:
                return
            with contextlib.suppress(TimeoutError):
                await self.store.wait_position(target, 5.0)

    def line(self, entry: Entry, type_: str, key: FeedKey, res: Resource) -> bytes:
        """A change's watch event line as ``type_``, in ``key``'s version and format, built once
        for every feed (the last ``_LINES`` are kept). A Table line has no column definitions
        (only a watch's first event carries them, as upstream)."""
        cache_key = (entry.seq, type_, key.version, key.table)
        data = self._lines.get(cache_key)
        if data is None:
            self.stats["lines"] += 1
            obj = self.encodings.get(res, entry.obj, key.version, keep=entry.type != "DELETED")
            if key.table is not None:
                rv = int(object_meta(entry.obj).resource_version or 0)
                obj = table_json(res, [entry.obj], [obj], rv, key.table, definitions=False)
            data = event_line(type_, obj)
            self._lines[cache_key] = data
            if len(self._lines) > _LINES:
                self._lines.pop(next(iter(self._lines)))
        return data

    def subscribe(
        self, key: FeedKey, res: Resource, selected: Selector | None, since: int, bookmarks: bool = False
    ) -> tuple[Watcher, list[Entry]] | None:
        """A watcher in ``key``'s feed plus the released changes of its kind and namespace after
        ``since``; None when ``since`` is older than the cache holds (410 Gone)."""
        if since < self.floor:
            return None
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds[key] = Feed(self, key, res, selected)
            self._by_kind.setdefault(key.kind, []).append(feed)
        watcher = Watcher(feed, since, bookmarks)
        backlog = (
            [
                e
                for e in self.ring
                if e.seq > since
                and e.kind == key.kind
                and (key.namespace is None or e.namespace == key.namespace)
            ]
            if since < self.position
            else []
        )
        feed.watchers.add(watcher)
        if bookmarks and self._bookmarks is None and not self.closed.is_set():
            loop = asyncio.get_running_loop()
            self._bookmarks = loop.call_later(self.bookmark_every_s, self._bookmark_tick)
        return watcher, backlog

    def watchers(self) -> int:
        return sum(len(feed.watchers) for feed in self._feeds.values())

    def feeds(self) -> int:
        return len(self._feeds)

    def unsubscribe(self, watcher: Watcher) -> None:
        feed = watcher.feed
        feed.watchers.discard(watcher)
        if not feed.watchers and self._feeds.get(feed.key) is feed:
            del self._feeds[feed.key]
            self._by_kind[feed.key.kind].remove(feed)
            self._dirty.pop(feed, None)
