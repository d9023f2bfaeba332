"""WATCH: the log's changes from a resourceVersion (a stream sequence) on, as a chunked JSON stream.

A watch reads from the watch cache (``kubeapi.watchcache``): the changes after its
resourceVersion that the cache still holds, then each change as it is released, in stream order.
A watch from a resourceVersion older than the cache's window gets upstream's ``410 Gone`` ERROR
event ("too old resource version"), and the client lists again. Bookmarks carry the position when
nothing else happens (``allowWatchBookmarks``); ``sendInitialEvents=true`` starts with the current
objects and ends them with the ``k8s.io/initial-events-end`` bookmark (client-go's watch-list).

Each watch has a task that writes what the connection cannot be sent directly: its backlog, a
Table watch's first event (with the column definitions), and whatever queued while the client
was slow to read. Once caught up, a watch is written to by the cache's wake-up without its task.
"""

from __future__ import annotations

import asyncio
import contextlib
import random

from aiohttp import web

from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import object_meta
from draflow.services.apiserver.kubeapi.encoding import status_json
from draflow.services.apiserver.kubeapi.resources import Resource
from draflow.services.apiserver.kubeapi.tables import column_definitions, table_json
from draflow.services.apiserver.kubeapi.watchcache import (
    BOOKMARK_EVERY_S,
    COALESCE_S,
    MAX_BACKLOG,
    Entry,
    FeedKey,
    Selector,
    WatchCache,
    event_line,
)

__all__ = ["BOOKMARK_EVERY_S", "COALESCE_S", "MAX_BACKLOG", "WatchCache", "serve_watch"]

_DIRECT_LIMIT = 256 * 1024  # bytes a connection may have unsent and still be written to directly
_NO_COLUMNS = b'"columnDefinitions":[]'


async def serve_watch(
    request: web.Request,
    cache: WatchCache,
    res: Resource,
    version: str,
    namespace: str | None,
    selected: Selector,
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
    labels, fields = q.get("labelSelector", ""), q.get("fieldSelector", "")
    key = FeedKey(res.kind, namespace, version, include if as_table else None, labels, fields)
    sub = cache.subscribe(key, res, selected if labels or fields else None, since, bookmarks)
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    if sub is None:
        gone = status_json(410, "Expired", f"too old resource version: {rv} ({cache.floor})")
        await resp.write(event_line("ERROR", gone))
        await resp.write_eof()
        return resp
    watcher, backlog = sub
    feed = watcher.feed
    columns = [as_table]  # a Table watch's first event carries the column definitions

    def first_columns(data: bytes) -> bytes:
        if columns[0] and data:
            columns[0] = False
            return data.replace(_NO_COLUMNS, b'"columnDefinitions":' + column_definitions(res.kind), 1)
        return data

    def initial_event(obj: ApiStruct) -> bytes:
        data = cache.encodings.get(res, obj, version)
        if as_table:
            rv_ = int(object_meta(obj).resource_version or 0)
            data = table_json(res, [obj], [data], rv_, include, definitions=False)
        return event_line("ADDED", data)

    def translated(entries: list[Entry]) -> bytes:
        return first_columns(b"".join([c for c in map(feed.translate, entries) if c is not None]))

    loop = asyncio.get_running_loop()
    transport = request.transport
    watcher.last_write = loop.time()

    def sink(data: bytes) -> bool:
        if transport is None or transport.is_closing() or transport.get_write_buffer_size() > _DIRECT_LIMIT:
            return False
        transport.write(data)  # the headers went out with prepare(): chunks may follow
        watcher.last_write = loop.time()
        cache.stats["writes"] += 1
        return True

    ended = [False]

    def end_watch() -> None:
        ended[0] = True
        watcher.wake.set()

    end = loop.call_at(loop.time() + timeout, end_watch)
    try:
        if synthetic:
            chunks = []
            for obj in cache.store.index.items(res.kind, namespace):
                if int(object_meta(obj).resource_version or 0) <= since and selected(obj):
                    chunks.append(initial_event(obj))
            if chunks:
                await resp.write(first_columns(b"".join(chunks)))
            if initial:
                await resp.write(feed.bookmark(since, {"k8s.io/initial-events-end": "true"}))
            backlog = [e for e in backlog if e.seq > since]
        if backlog and (out := translated(backlog)):
            await resp.write(out)
        watcher.last_write = loop.time()
        while not cache.closed.is_set():
            if not columns[0]:
                watcher.sink = sink  # caught up: the cache's wake-up writes from here on
            if not watcher.queue and not watcher.bookmark_due:
                watcher.wake.clear()
                await watcher.wake.wait()
            if ended[0] or watcher.overflowed:
                break
            entries = list(watcher.queue)
            watcher.queue.clear()
            if entries and (out := translated(entries)):
                await resp.write(out)  # waits for a slow client; what queues meanwhile comes next
                watcher.last_write = cache.flushed_at = loop.time()  # the next window starts after it
            elif watcher.bookmark_due and loop.time() - watcher.last_write >= cache.bookmark_every_s:
                await resp.write(feed.bookmark(feed.sent_position()))
                watcher.last_write = loop.time()
            watcher.bookmark_due = False
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        watcher.sink = None
        end.cancel()
        cache.unsubscribe(watcher)
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await resp.write_eof()
    return resp
