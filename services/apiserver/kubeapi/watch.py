"""WATCH: the log's changes from a resourceVersion (a stream sequence) on, as a chunked JSON stream.

The watch cache keeps the last ``capacity`` object changes the apiserver's store folded, in stream
order, each with the object before it (so a label-selected watch sees an object that stops
matching as DELETED and one that starts matching as ADDED, as upstream). A change is released to
watchers once the store's log position has reached it: the apiserver folds its own appends before
the log delivers them, and a watcher must never see sequence 105 before 103. A watch from a
resourceVersion older than the cache's window gets upstream's ``410 Gone`` ERROR event ("too old
resource version"), and the client lists again. Bookmarks carry the position when nothing else
happens (``allowWatchBookmarks``); ``sendInitialEvents=true`` starts with the current objects and
ends them with the ``k8s.io/initial-events-end`` bookmark (client-go's watch-list).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec
from aiohttp import web
from msgspec.structs import replace

from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import object_meta
from draflow.projections.objects import Change
from draflow.services.apiserver.kubeapi.encoding import EncodingCache, status_json
from draflow.services.apiserver.kubeapi.resources import Resource, by_kind
from draflow.services.apiserver.kubeapi.tables import table_json
from draflow.services.runtime.store import ApiStore

__all__ = ["WatchCache", "serve_watch"]

BOOKMARK_EVERY_S = 5.0
# watchers are woken together, not before this long after their last writes: the changes released
# meanwhile go out in one write per watcher (one TLS record, one send) instead of one each, and the
# apiserver's own work runs in between; after a quiet window a change goes out at once
COALESCE_S = 0.005
_LINES = 4096  # encoded event lines shared by watchers
_DIRECT_LIMIT = 256 * 1024  # bytes a connection may have unsent and still be written to directly
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


@dataclass(eq=False)
class Watcher:
    kind: str
    namespace: str | None
    since: int = 0  # changes at or before this version are not this watcher's
    queue: deque[Entry] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    overflowed: bool = False
    # writes the queued changes to the connection at once (unselected JSON watches); False when
    # the connection is backed up: the watcher's own task then writes and waits for the client
    sink: Callable[[], bool] | None = None
    last_write: float = 0.0

    def push(self, entry: Entry) -> bool:
        """Queue a released change; True when the watcher has something to do."""
        if entry.seq <= self.since:
            return False  # released after the watch began, but older than the version it asked for
        if len(self.queue) >= MAX_BACKLOG:
            self.overflowed = True
        else:
            self.queue.append(entry)
        return True


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
        self.encodings = encodings
        self.ring: deque[Entry] = deque()
        self.capacity = capacity
        self.floor = 0  # changes after this sequence are all in the ring
        self.position = 0  # changes up to here are released
        self.latest = 0  # the newest change folded (this process's appends run ahead of the log)
        self._pending: list[Entry] = []
        self._last: dict[tuple[str, str, str], ApiStruct] = {}
        self._watchers: dict[str, set[Watcher]] = {}
        self._started = False
        self._catching_up: asyncio.Future[None] | None = None
        self._lines: dict[tuple[int, str, str], bytes] = {}
        self._dirty: set[Watcher] = set()  # watchers with changes they have not been woken for
        self._blocks: dict[tuple[int, int, int, str, str | None, str], bytes] = {}
        self._flush: asyncio.Handle | None = None
        self.flushed_at = -1e9
        self.closed = asyncio.Event()

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
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        for watchers in self._watchers.values():
            for w in watchers:
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
            for w in self._watchers.get(entry.kind, ()):
                if (w.namespace is None or w.namespace == entry.namespace) and w.push(entry):
                    dirty.add(w)
        while len(self.ring) > self.capacity:
            self.floor = self.ring.popleft().seq
        self.position = max(self.position, position)
        if dirty and self._flush is None:
            loop = asyncio.get_running_loop()
            delay = self.flushed_at + self.coalesce_s - loop.time()
            if delay <= 0:
                self._flush = loop.call_soon(self._wake)
            else:
                self._flush = loop.call_later(delay, self._wake)

    def _wake(self) -> None:
        """Write to or wake every watcher with released changes, all at once (``COALESCE_S``):
        unselected JSON watchers get the same bytes, built once, written here without a task
        switch; the others (and backed-up connections) are woken to write themselves."""
        self._flush = None
        self._blocks.clear()
        dirty, self._dirty = self._dirty, set()
        for w in dirty:
            if w.sink is None or not w.sink():
                w.wake.set()
        self.flushed_at = asyncio.get_running_loop().time()  # and again after each woken one writes

    def block(self, queue: deque[Entry], version: str, res: Resource, namespace: str | None) -> bytes:
        """The HTTP chunk of the queued changes for an unselected JSON watcher, built once per
        wake-up for every watcher with the same changes (same first and last change and count:
        watchers of a kind see subsets of one sequence, so equal keys are equal contents)."""
        key = (queue[0].seq, queue[-1].seq, len(queue), queue[0].kind, namespace, version)
        data = self._blocks.get(key)
        if data is None:
            body = b"".join([self.line(e, version, res) for e in queue])
            data = b"%x\r\n" % len(body) + body + b"\r\n"
            self._blocks[key] = data
        return data

    async def consistent(self, attempts: int = 3) -> None:
        """Until the store has folded everything up to the newest change it holds: a LIST read
        then is a snapshot at ``store.position`` (its resourceVersion), nothing newer mixed in."""
        for _ in range(attempts):
            target = self.latest
            if target <= self.store.position:
                return
            with contextlib.suppress(TimeoutError):
                await self.store.wait_position(target, 5.0)

    def line(self, entry: Entry, version: str, res: Resource) -> bytes:
        """The watch event line of a change for an unselected JSON watch, encoded once for all
        such watchers (the last ``_LINES`` changes are kept)."""
        key = (entry.seq, entry.kind, version)
        data = self._lines.get(key)
        if data is None:
            keep = entry.type != "DELETED"
            data = _event(entry.type, self.encodings.get(res, entry.obj, version, keep=keep))
            self._lines[key] = data
            if len(self._lines) > _LINES:
                self._lines.pop(next(iter(self._lines)))
        return data

    def subscribe(self, kind: str, namespace: str | None, since: int) -> tuple[Watcher, list[Entry]] | None:
        """A watcher of ``kind`` plus the released changes after ``since``; None when ``since`` is
        older than the cache holds (410 Gone)."""
        if since < self.floor:
            return None
        watcher = Watcher(kind, namespace, since)
        backlog = (
            [
                e
                for e in self.ring
                if e.seq > since and e.kind == kind and (namespace is None or e.namespace == namespace)
            ]
            if since < self.position
            else []
        )
        self._watchers.setdefault(kind, set()).add(watcher)
        return watcher, backlog

    def unsubscribe(self, watcher: Watcher) -> None:
        self._watchers.get(watcher.kind, set()).discard(watcher)
        self._dirty.discard(watcher)


def _event(kind: str, obj: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + obj + b"}\n"


async def serve_watch(
    request: web.Request,
    cache: WatchCache,
    res: Resource,
    version: str,
    namespace: str | None,
    selected: Callable[..., bool],
) -> web.StreamResponse:
    q = request.query
    rv = q.get("resourceVersion", "")
    bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
    initial = q.get("sendInitialEvents") in ("true", "1")
    accept = request.headers.get("Accept", "")
    as_table = "as=Table" in accept and "g=meta.k8s.io" in accept
    include = q.get("includeObject", "Metadata")
    try:
        timeout = float(q.get("timeoutSeconds") or 0) or random.uniform(1800, 3600)
    except ValueError:
        timeout = 1800.0
    if rv and not rv.isdigit():
        from draflow.services.apiserver.kubeapi.http import ApiError

        raise ApiError(400, "BadRequest", f'invalid resource version "{rv}"')
    since = int(rv) if rv and rv != "0" else cache.position
    synthetic = not rv or rv == "0" or initial
    if initial and rv and rv != "0":
        since = max(since, cache.position)
    sub = cache.subscribe(res.kind, namespace, since)
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    if sub is None:
        gone = status_json(410, "Expired", f"too old resource version: {rv} ({cache.floor})")
        await resp.write(_event("ERROR", gone))
        await resp.write_eof()
        return resp
    watcher, backlog = sub
    first_table = [True]

    def render(obj: ApiStruct, keep: bool = True) -> bytes:
        data = cache.encodings.get(res, obj, version, keep=keep)
        if not as_table:
            return data
        out = table_json(res, [obj], [data], int(object_meta(obj).resource_version or 0), include)
        if first_table[0]:
            first_table[0] = False
            return out
        return out.replace(b'"columnDefinitions":' + _definitions_bytes(out), b'"columnDefinitions":[]', 1)

    def bookmark(position: int, annotations: dict[str, str] | None = None) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(position)}
        if annotations:
            meta["annotations"] = annotations
        obj = {"kind": res.wire_kind, "apiVersion": res.api_version(version), "metadata": meta}
        return _event("BOOKMARK", _encode(obj))

    everything = not q.get("labelSelector") and not q.get("fieldSelector")

    def translate(entry: Entry) -> bytes | None:
        if everything and not as_table:  # the common case: one encoding shared by every watcher
            return cache.line(entry, version, res)
        now = entry.type != "DELETED" and selected(entry.obj)
        before = entry.prev is not None and selected(entry.prev)
        if entry.type == "DELETED":
            return _event("DELETED", render(entry.obj, keep=False)) if before else None
        if now and not before:
            return _event("ADDED", render(entry.obj))
        if now:
            return _event("MODIFIED", render(entry.obj))
        if before:
            return _event("DELETED", render(entry.obj))
        return None

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    # one timer wakes the watcher for bookmarks and its deadline (no timeout context per wake-up)
    tick = _Ticker(loop, watcher.wake, cache.bookmark_every_s)
    end = loop.call_at(deadline, watcher.wake.set)
    try:
        if synthetic:
            chunks = []
            for obj in cache.store.index.items(res.kind, namespace):
                if int(object_meta(obj).resource_version or 0) <= since and selected(obj):
                    chunks.append(_event("ADDED", render(obj)))
            if chunks:
                await resp.write(b"".join(chunks))
            if initial:
                await resp.write(bookmark(since, {"k8s.io/initial-events-end": "true"}))
            backlog = [e for e in backlog if e.seq > since]
        out = [c for c in (translate(e) for e in backlog) if c is not None]
        if out:
            await resp.write(b"".join(out))
        watcher.last_write = loop.time()
        transport = request.transport
        if everything and not as_table and transport is not None:

            def sink() -> bool:
                if transport.is_closing() or transport.get_write_buffer_size() > _DIRECT_LIMIT:
                    return False
                queue = watcher.queue
                if queue:
                    data = cache.block(queue, version, res, namespace)
                    queue.clear()
                    transport.write(data)  # the headers went out with prepare(): chunks may follow
                    watcher.last_write = loop.time()
                return True

            watcher.sink = sink
        last_bookmark = loop.time()
        while not cache.closed.is_set():
            if not watcher.queue:
                watcher.wake.clear()
                await watcher.wake.wait()
            if loop.time() >= deadline or watcher.overflowed:
                break
            batch = []
            while watcher.queue:
                chunk = translate(watcher.queue.popleft())
                if chunk is not None:
                    batch.append(chunk)
            if batch:
                await resp.write(b"".join(batch))
                watcher.last_write = cache.flushed_at = loop.time()  # the next window starts after it
            elif bookmarks and loop.time() - max(last_bookmark, watcher.last_write) >= cache.bookmark_every_s:
                await resp.write(bookmark(cache.position))
                last_bookmark = loop.time()
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        watcher.sink = None
        tick.cancel()
        end.cancel()
        cache.unsubscribe(watcher)
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await resp.write_eof()
    return resp


class _Ticker:
    """Sets ``wake`` every ``every_s`` seconds until cancelled."""

    def __init__(self, loop: asyncio.AbstractEventLoop, wake: asyncio.Event, every_s: float) -> None:
        self.loop, self.wake, self.every_s = loop, wake, every_s
        self.handle = loop.call_later(every_s, self._fire)

    def _fire(self) -> None:
        self.wake.set()
        self.handle = self.loop.call_later(self.every_s, self._fire)

    def cancel(self) -> None:
        self.handle.cancel()


def _definitions_bytes(table: bytes) -> bytes:
    start = table.index(b'"columnDefinitions":') + len(b'"columnDefinitions":')
    end = table.index(b',"rows":', start)
    return table[start:end]


def resource_of(kind: str) -> Resource | None:
    return by_kind(kind)
