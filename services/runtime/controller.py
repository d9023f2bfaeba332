"""The shell the controllers, the kubelet and the example driver share: cache, loop and writes.

Why one runtime: every one of these services is *level-triggered* (consume → reduce → decide →
append, and decide again on everything after any change), so they need the same three things:

* a **cache** of every API object, folded from the log with the same reducers as the apiserver
  (:class:`draflow.services.runtime.store.ApiStore`: read from sequence 1 at start, then follow the
  stream). It is the service's projection; it lives in memory and is rebuilt from the log on
  every start, so a crash loses nothing and needs no checkpoint of its own;
* a **loop** that runs the service's ``sync`` pass whenever the cache changed (and on a timer),
  so each pass sees the latest state and drives towards the desired one;
* **writes**: creates / deletes / finalizers / Kubernetes Events through the apiserver's request
  API (admission, deletion semantics), domain facts (``draflow.events.dra``) appended straight onto the
  object's subject with its resourceVersion as the expected last sequence. A conflict means
  someone else moved the object: the write is dropped, the cache catches up and the next pass
  decides again. Every successful write is folded before the call returns (read-your-writes),
  so the next pass never repeats it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import encode_object, object_meta
from draflow.events.envelope import Event
from draflow.infra import tracing
from draflow.infra.eventstore import ConcurrencyError, EventStore, new_id
from draflow.projections.objects import Change
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.keyed import KeyedSyncs
from draflow.services.runtime.protocol import DeleteItem, DeleteRequest, StatusError
from draflow.services.runtime.store import ApiStore

__all__ = ["Runtime"]

log = logging.getLogger(__name__)

Sync = Callable[[], Awaitable[None]]
STOP_GRACE_S = 5.0  # on stop, per-object syncs in flight get this long to finish


class Runtime:
    def __init__(
        self,
        events: EventStore,
        *,
        actor: str,
        api_timeout_s: float = 30.0,
        node: str = "",
        snapshot_writer: bool = False,
    ) -> None:
        """``node``: a kubelet's runtime, whose writes all go through the apiserver's node API
        (NodeRestriction), appends included: a kubelet's credential may not publish on the log.
        ``snapshot_writer``: its cache writes snapshots of the object fold (every cache loads them)."""
        self.events = events
        self.actor = actor
        self.node = node
        self.cache = ApiStore(events, snapshot_writer=snapshot_writer)
        self.api = ApiClient(events.nc, events.settings, timeout_s=api_timeout_s, actor=actor, node=node)
        self._changed = asyncio.Event()
        self.cache.listen(self._on_change)
        self.kinds: frozenset[str] | None = None  # only changes of these kinds wake the loop
        self.passes = 0
        self._keyed: list[KeyedSyncs] = []

    def keyed_syncs(self, **kwargs: Any) -> KeyedSyncs:
        """Per-object syncs that outlive a pass (:mod:`draflow.services.runtime.keyed`): the loop's
        stop lets those in flight finish (``STOP_GRACE_S``), then cancels them."""
        syncs = KeyedSyncs(name=self.actor, **kwargs)
        self._keyed.append(syncs)
        return syncs

    def _on_change(self, kind: str, namespace: str, name: str, change: Change) -> None:
        if self.kinds is None or kind in self.kinds:
            self._changed.set()

    async def start(self) -> None:
        await self.cache.start()

    async def wait_for_apiserver(self, timeout_s: float = 120.0) -> None:
        """Return once an apiserver answers: a service's first write must not race its start-up
        (honcho starts every process at once)."""
        delay = 0.1
        async with asyncio.timeout(timeout_s):
            while True:
                try:
                    await self.api.list("Namespace")
                    return
                except StatusError as exc:
                    if exc.status.code not in (503, 504):
                        raise
                    log.info("%s: waiting for the apiserver (%s)", self.actor, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def stop(self) -> None:
        for syncs in self._keyed:
            await syncs.close()
        await self.cache.stop()

    # -- reads -------------------------------------------------------------------------------

    def items(self, kind: str, namespace: str | None = None) -> list[Any]:
        return self.cache.index.items(kind, namespace)

    def get(self, kind: str, namespace: str, name: str) -> Any:
        return self.cache.index.get(kind, namespace, name)

    # -- the loop ----------------------------------------------------------------------------

    def kick(self) -> None:
        """Run another pass soon (something outside the cache changed, e.g. a retry is due)."""
        self._changed.set()

    async def run(
        self, stop: asyncio.Event, sync: Sync, *, resync_s: float = 5.0, settle_s: float = 0.02
    ) -> None:
        """Call ``sync`` after every change of the cache (and every ``resync_s``) until ``stop``."""
        try:
            await self._loop(stop, sync, resync_s, settle_s)
        finally:
            grace = STOP_GRACE_S if stop.is_set() else 0.0  # cancelled: no waiting
            for syncs in self._keyed:  # a stop: what a pass started may finish, as the pass did
                await syncs.close(grace)

    async def _loop(self, stop: asyncio.Event, sync: Sync, resync_s: float, settle_s: float) -> None:
        backoff = 0.1
        while not stop.is_set():
            self._changed.clear()
            try:
                await sync()
                backoff = 0.1
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed pass is retried: the state it acts on is in the log
                log.exception("%s: sync pass failed; retrying in %.1fs", self.actor, backoff)
                await _wait(stop, backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            self.passes += 1
            waker = asyncio.ensure_future(self._changed.wait())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({waker, stopper}, timeout=resync_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for fut in (waker, stopper):
                    fut.cancel()
            await asyncio.sleep(settle_s)  # let a burst of events land before deciding

    @contextlib.asynccontextmanager
    async def step(self, kind: str, namespace: str, name: str, what: str) -> AsyncIterator[None]:
        """A span around one step on one object, in the trace of the object's last event (the fact
        that made the step due: the scheduler's ``PodBound`` for a kubelet starting a pod), so a
        pod's journey is one trace across the services. Costs nothing when tracing is off."""
        if not tracing.enabled():
            yield
            return
        subject = self.events.subject(kind, namespace or None, name)
        last = await self.events.last(subject)
        attributes = {
            "draflow.object": f"{kind} {namespace}/{name}",
            "draflow.actor": self.actor,
            "messaging.destination.name": subject,
            "messaging.consumer.group.name": self.actor,
        }
        if kind == "Pod":
            attributes["k8s.pod.name"], attributes["k8s.namespace.name"] = name, namespace
        with tracing.consumer_span(what, None, last.traceparent if last else "", attributes):
            yield

    # -- writes ------------------------------------------------------------------------------

    async def append(self, kind: str, namespace: str, name: str, events: Sequence[Event]) -> bool:
        """Append domain events onto the object's subject at the version we hold; False on conflict."""
        if not events:
            return True
        if self.get(kind, namespace, name) is None:
            return False
        try:
            if self.node:
                await self._append_through_apiserver(kind, namespace, name, events)
            else:
                await self.cache.append(kind, namespace, name, events)
        except StatusError as exc:  # refused (NodeRestriction) or no apiserver: the next pass retries
            log.warning("%s: append to %s %s/%s: %s", self.actor, kind, namespace, name, exc)
            return False
        except ConcurrencyError:
            log.info("%s: %s %s/%s changed meanwhile; deciding again", self.actor, kind, namespace, name)
            await self.cache.sync(kind, namespace, name)
            return False
        return True

    async def _append_through_apiserver(
        self, kind: str, namespace: str, name: str, events: Sequence[Event]
    ) -> None:
        version = self.cache.index.version(kind, namespace, name)
        seq = await self.api.append_events(
            kind, namespace, name, events, expected_last_seq=version, msg_id=new_id()
        )
        # read-your-writes, as for a direct append: the events are consecutive (one atomic batch)
        self.cache.fold_appended(kind, namespace, name, events, range(seq - len(events) + 1, seq + 1))

    async def create(self, obj: ApiStruct) -> bool:
        """Create through the apiserver (admission); an existing object counts as done."""
        meta = object_meta(obj)
        (result,) = await self.api.apply([encode_object(obj)], create_only=True, namespace=meta.namespace)
        if result.error is not None:
            if result.error.code == 409 and result.error.reason == "AlreadyExists":
                return True
            log.warning("%s: create %s %s: %s", self.actor, obj.KIND, meta.name, result.error.message)
            return False
        await self._caught_up(result.resource_version)
        return True

    async def apply(self, obj: ApiStruct) -> bool:
        """Create or update through the apiserver (used for objects this service owns)."""
        meta = object_meta(obj)
        (result,) = await self.api.apply([encode_object(obj)], namespace=meta.namespace)
        if result.error is not None:
            log.warning("%s: apply %s %s: %s", self.actor, obj.KIND, meta.name, result.error.message)
            return False
        await self._caught_up(result.resource_version)
        return True

    async def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str = "",
        grace_period_seconds: int | None = None,
        propagation_policy: str = "",
    ) -> bool:
        req = DeleteRequest(
            items=[DeleteItem(kind=kind, namespace=namespace, name=name, uid=uid)],
            grace_period_seconds=grace_period_seconds,
            propagation_policy=propagation_policy,
        )
        try:
            results = (await self.api.request("delete", req)).results or []
        except StatusError as exc:
            log.warning("%s: delete %s %s/%s: %s", self.actor, kind, namespace, name, exc)
            return False
        if not results:
            return False
        result = results[0]
        if result.error is not None:
            if result.error.code != 404:
                log.info("%s: delete %s %s/%s: %s", self.actor, kind, namespace, name, result.error.message)
            return False
        await self._caught_up(result.resource_version or None)
        return True

    async def update_status(self, obj: Any, status: Any) -> bool:
        """Replace the status (kinds without a domain event for it), at the version we hold."""
        meta = object_meta(obj)
        try:
            out = await self.api.update_status(
                obj.KIND, meta.name, status, namespace=meta.namespace, resource_version=meta.resource_version
            )
        except StatusError as exc:
            log.info("%s: status of %s %s: %s", self.actor, obj.KIND, meta.name, exc)
            await self.cache.sync(obj.KIND, meta.namespace, meta.name)
            return False
        await self._caught_up(_rv(out))
        return True

    async def remove_finalizer(
        self, kind: str, namespace: str, name: str, finalizer: str, *, resource_version: str = ""
    ) -> bool:
        try:
            out = await self.api.finalize(
                kind, name, namespace=namespace, remove=[finalizer], resource_version=resource_version
            )
        except StatusError as exc:
            log.info("%s: finalizer of %s %s/%s: %s", self.actor, kind, namespace, name, exc)
            return False
        await self._caught_up(_rv(out))
        return True

    async def record_event(
        self,
        kind: str,
        namespace: str,
        name: str,
        type_: str,
        reason: str,
        message: str,
        *,
        host: str = "",
        component: str = "",
    ) -> None:
        """A Kubernetes Event from ``component`` (default: this service's actor)."""
        try:
            await self.api.record_event(
                kind, name, reason, message, namespace=namespace, type_=type_, host=host, component=component
            )
        except StatusError as exc:
            log.warning("%s: event %s on %s %s/%s: %s", self.actor, reason, kind, namespace, name, exc)

    async def _caught_up(self, resource_version: str | None) -> None:
        """Wait until the cache has folded our own write (read-your-writes for the next pass)."""
        if resource_version and resource_version.isdigit():
            with contextlib.suppress(TimeoutError):
                await self.cache.wait_position(int(resource_version), 10.0)
        else:
            with contextlib.suppress(TimeoutError):
                await self.cache.wait_position(await self.events.stream_last_seq(), 10.0)


def _rv(obj: dict[str, Any] | None) -> str | None:
    if not obj:
        return None
    rv = obj.get("metadata", {}).get("resourceVersion")
    return rv if isinstance(rv, str) else None


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
