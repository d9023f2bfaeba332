"""Talking to the apiserver: the async client the CLI, controllers and tests use.

Every method sends one request on ``<root>.api.<verb>`` and returns the reply's payload or raises
:class:`StatusError` carrying the Kubernetes-style Status (``503 ServiceUnavailable`` when no
apiserver answers). ``watch`` lists, then follows the log itself (a :class:`Tail` filtered by kind)
and folds the events with the same reducers as the apiserver, yielding ADDED / MODIFIED / DELETED.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

import msgspec
import nats.errors
from nats.aio.client import Client

from draflow.events.api.base import ApiStruct
from draflow.events.codec import DecodeError, decode
from draflow.events.envelope import Event
from draflow.events.objects import decode_stored
from draflow.events.subjects import aggregate_subject, encode_token, parse_subject
from draflow.infra import tracing
from draflow.infra.config import Settings
from draflow.infra.errors import ConcurrencyError
from draflow.infra.eventstore import EventStore
from draflow.infra.nats_client import DraflowClient, connect
from draflow.projections.objects import Change, ObjectIndex
from draflow.services.runtime.protocol import (
    ACTING_FOR_HEADER,
    AppendEventsRequest,
    ApplyItem,
    ApplyRequest,
    DeleteItem,
    DeleteRequest,
    EventRequest,
    FinalizeRequest,
    GetRequest,
    ItemResult,
    ListRequest,
    ReplyIn,
    StatusError,
    StatusRequest,
    api_subject,
    kube_api_subject,
    node_api_subject,
)
from draflow.services.runtime.selectors import parse_label_selector
from draflow.services.runtime.tail import Tail

__all__ = ["ApiClient"]

CHUNK_ITEMS = 500
_encoder = msgspec.json.Encoder()
_reply = msgspec.json.Decoder(ReplyIn)


class ApiClient:
    def __init__(
        self,
        nc: Client,
        settings: Settings,
        *,
        timeout_s: float = 30.0,
        actor: str = "client",
        wait_for_server_s: float = 30.0,
        node: str = "",
    ) -> None:
        """``timeout_s``: how long one request may take; ``wait_for_server_s``: how long to keep
        retrying while no apiserver is subscribed yet (services starting together); ``node``: a
        kubelet's client, whose requests go to its node's API (NodeRestriction)."""
        self.nc = nc
        self.node = node
        self.settings = settings
        self.timeout_s = timeout_s
        self.actor = actor
        self.wait_for_server_s = wait_for_server_s
        self._own_connection = False

    @classmethod
    async def connect(
        cls,
        settings: Settings,
        *,
        actor: str = "draflow",
        timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        wait_for_server_s: float = 30.0,
    ) -> ApiClient:
        nc = await connect(settings, actor, connect_timeout_s=connect_timeout_s)
        client = cls(nc, settings, timeout_s=timeout_s, actor=actor, wait_for_server_s=wait_for_server_s)
        client._own_connection = True
        return client

    async def close(self) -> None:
        if self._own_connection and not self.nc.is_closed:
            try:
                await self.nc.drain()
            except (OSError, nats.errors.Error, TimeoutError):  # the server went first (honcho stop)
                self.nc.options["allow_reconnect"] = False
                with contextlib.suppress(OSError, nats.errors.Error, TimeoutError):
                    await self.nc.close()

    async def request(self, verb: str, req: msgspec.Struct) -> ReplyIn:
        root = self.settings.root
        subject = node_api_subject(root, self.node, verb) if self.node else api_subject(root, verb)
        reply = await self._send(subject, _encoder.encode(req), tracing.inject_headers())
        if reply.error is not None:
            raise StatusError(reply.error)
        return reply

    async def forward(self, verb: str, data: bytes, acting_for: str | None) -> ReplyIn:
        """The Kubernetes API replica's write, as the user ``acting_for`` (``user:alice``): the
        request as the client sent it, to the subject only the replica's credential may publish
        on; the reply is returned as is, a refusal included."""
        headers = tracing.inject_headers() or {}
        if acting_for:
            headers[ACTING_FOR_HEADER] = acting_for
        return await self._send(kube_api_subject(self.settings.root, verb), data, headers or None)

    async def _send(self, subject: str, data: bytes, headers: dict[str, str] | None) -> ReplyIn:
        if len(data) > self.nc.max_payload:
            raise StatusError.of(
                413, "RequestEntityTooLarge", f"request of {len(data)} bytes exceeds {self.nc.max_payload}"
            )
        deadline = time.monotonic() + self.wait_for_server_s
        pause = 0.05
        while True:
            try:
                msg = await self.nc.request(subject, data, timeout=self.timeout_s, headers=headers)
                break
            except nats.errors.NoRespondersError:
                # nobody received the request, so retrying cannot apply it twice
                if time.monotonic() + pause > deadline:
                    raise StatusError.of(
                        503,
                        "ServiceUnavailable",
                        f"no apiserver answers on {subject} at {self.settings.nats_url}",
                    ) from None
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
            except nats.errors.TimeoutError:
                raise StatusError.of(
                    504, "Timeout", f"the apiserver did not answer within {self.timeout_s}s"
                ) from None
        return _reply.decode(msg.data)

    # -- writes --------------------------------------------------------------------------------

    async def append_events(
        self,
        kind: str,
        namespace: str,
        name: str,
        events: Sequence[Event],
        *,
        expected_last_seq: int | None,
        msg_id: str,
    ) -> int:
        """A node's domain facts on one object, appended by the apiserver once NodeRestriction
        admitted them; returns the last one's sequence. A conflict is the event store's
        ConcurrencyError, as for a direct append."""
        req = AppendEventsRequest(
            kind=kind,
            namespace=namespace,
            name=name,
            events=[msgspec.to_builtins(ev) for ev in events],
            expected_last_seq=expected_last_seq,
            msg_id=msg_id,
        )
        try:
            return (await self.request("append", req)).resource_version
        except StatusError as exc:
            if exc.status.code == 409:
                subject = aggregate_subject(kind, namespace or None, name, self.settings.root)
                raise ConcurrencyError(subject, expected_last_seq or 0) from None
            raise

    async def apply(
        self,
        manifests: Sequence[Any],
        *,
        source: str = "",
        namespace: str = "",
        enforce_namespace: bool = False,
        create_only: bool = False,
        dry_run: bool = False,
    ) -> list[ItemResult]:
        """Apply manifests (dicts) in order; one result per manifest. Sent in chunks that fit."""
        results: list[ItemResult] = []
        verb = "create" if create_only else "apply"
        budget = self.nc.max_payload - 4096
        chunk: list[ApplyItem] = []
        size = 0

        async def send() -> None:
            nonlocal chunk, size
            if chunk:
                req = ApplyRequest(
                    items=chunk, namespace=namespace, enforce_namespace=enforce_namespace, dry_run=dry_run
                )
                results.extend((await self.request(verb, req)).results or [])
            chunk, size = [], 0

        for manifest in manifests:
            item = ApplyItem(manifest=manifest, source=source)
            try:
                n = len(_encoder.encode(item)) + 1
            except (UnicodeEncodeError, TypeError, ValueError, OverflowError) as exc:
                await send()  # keep the order of results
                err = StatusError.of(400, "BadRequest", f"the object cannot be sent as JSON: {exc}")
                results.append(ItemResult(error=err.status))
                continue
            if n > budget:
                await send()
                err = StatusError.of(
                    413, "RequestEntityTooLarge", f"object of {n} bytes exceeds the limit of {budget}"
                )
                results.append(ItemResult(error=err.status))
                continue
            if size + n > budget or len(chunk) >= CHUNK_ITEMS:
                await send()
            chunk.append(item)
            size += n
        await send()
        return results

    async def delete(
        self,
        items: Iterable[tuple[str, str, str]],
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str = "",
    ) -> list[ItemResult]:
        """Delete (kind, namespace, name) objects; one result per object. ``propagation_policy``:
        Foreground / Background / Orphan for the dependents (garbage collector), "" = the default."""
        req = DeleteRequest(
            items=[DeleteItem(kind=k, namespace=ns, name=n) for k, ns, n in items],
            grace_period_seconds=grace_period_seconds,
            propagation_policy=propagation_policy,
        )
        return (await self.request("delete", req)).results or []

    async def update_status(
        self, kind: str, name: str, status: Any, *, namespace: str = "", resource_version: str = ""
    ) -> dict[str, Any] | None:
        """Replace the object's status (a Struct or its JSON form); 409 when resource_version is stale."""
        body = msgspec.to_builtins(status) if isinstance(status, msgspec.Struct) else status
        req = StatusRequest(
            kind=kind, name=name, namespace=namespace, status=body, resource_version=resource_version
        )
        return _obj(await self.request("status", req))

    async def finalize(
        self,
        kind: str,
        name: str,
        *,
        namespace: str = "",
        add: Sequence[str] = (),
        remove: Sequence[str] = (),
        resource_version: str = "",
    ) -> dict[str, Any] | None:
        """Add/remove finalizers; the object afterwards (None once the last one let it go)."""
        req = FinalizeRequest(
            kind=kind,
            name=name,
            namespace=namespace,
            add=list(add),
            remove=list(remove),
            resource_version=resource_version,
        )
        return _obj(await self.request("finalize", req))

    async def record_event(
        self,
        kind: str,
        name: str,
        reason: str,
        message: str,
        *,
        namespace: str = "",
        type_: str = "Normal",
        component: str = "",
        host: str = "",
        reporting_instance: str = "",
    ) -> dict[str, Any] | None:
        """Record a Kubernetes Event about an object (Normal or Warning); ``reporting_instance``
        names which instance of ``component`` reports it (default: ``host``)."""
        req = EventRequest(
            kind=kind,
            name=name,
            namespace=namespace,
            reason=reason,
            message=message,
            type=type_,
            component=component or self.actor,
            host=host,
            reporting_instance=reporting_instance,
        )
        return _obj(await self.request("event", req))

    # -- reads ---------------------------------------------------------------------------------

    async def get(
        self, kind: str, name: str, *, namespace: str = "", min_resource_version: int = 0
    ) -> dict[str, Any]:
        reply = await self.request(
            "get",
            GetRequest(kind=kind, name=name, namespace=namespace, min_resource_version=min_resource_version),
        )
        obj = _obj(reply)
        assert obj is not None
        return obj

    async def get_object(self, kind: str, name: str, *, namespace: str = "") -> ApiStruct:
        """The object as its Struct (what controllers work with)."""
        return decode_stored(await self.get(kind, name, namespace=namespace))

    async def list(
        self,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        min_resource_version: int = 0,
    ) -> tuple[list[dict[str, Any]], int]:
        """All matching objects (``namespace=None``: every namespace) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            req = ListRequest(
                kind=kind,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                continue_=token,
                min_resource_version=min_resource_version,
            )
            reply = await self.request("list", req)
            items.extend(reply.items or [])
            if not reply.continue_:
                return items, reply.resource_version
            token = reply.continue_

    async def watch(
        self,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        initial: bool = True,
    ) -> AsyncIterator[Change]:
        """ADDED for what exists now (unless ``initial`` is False), then every change, forever."""
        matches = parse_label_selector(label_selector)
        items, rv = await self.list(kind, namespace=namespace, label_selector=label_selector)
        index = ObjectIndex()
        selected: set[tuple[str, str]] = set()  # keys currently inside the label selection
        for raw in items:
            obj = decode_stored(raw)
            meta = obj.metadata  # type: ignore[attr-defined]
            index.put(kind, meta.namespace, meta.name, obj, int(meta.resource_version or 0))
            selected.add((meta.namespace or "", meta.name))
            if initial:
                yield Change("ADDED", obj, int(meta.resource_version or 0))
        if not isinstance(self.nc, DraflowClient):
            raise TypeError("watch needs a DraflowClient connection (draflow.infra.nats_client.connect)")
        store = EventStore(self.nc, self.settings, self.actor)
        await store.start()
        ns_token = encode_token(namespace) if namespace else "*"
        tail = Tail(store, f"{self.settings.root}.ev.{encode_token(kind)}.{ns_token}.*", rv + 1)
        try:
            async for records in tail.batches():
                for rec in records:
                    _, ns, name = parse_subject(rec.subject, self.settings.root)
                    try:
                        env = decode(rec.data, rec.seq)
                    except DecodeError:
                        change = index.touch(kind, ns or "", name, rec.seq)
                    else:
                        change = index.apply_envelope(kind, ns or "", name, env)
                    if change is None:
                        continue
                    shown = _as_selected(change, matches, selected, (ns or "", name))
                    if shown is not None:
                        yield shown
                index.settle(records[-1].seq)
        finally:
            await tail.stop()


def _as_selected(
    change: Change,
    matches: Callable[[dict[str, str]], bool],
    selected: set[tuple[str, str]],
    key: tuple[str, str],
) -> Change | None:
    """A change as a label-selector watcher sees it, like the Kubernetes watch cache: an object that
    starts matching is ADDED, one that stops matching (or is deleted) is DELETED, others are hidden."""
    was_in = key in selected
    now_in = change.type != "DELETED" and matches(change.object.metadata.labels)  # type: ignore[attr-defined]
    if now_in:
        selected.add(key)
        return change if was_in else Change("ADDED", change.object, change.seq)
    selected.discard(key)
    return Change("DELETED", change.object, change.seq) if was_in else None


def _obj(reply: ReplyIn) -> dict[str, Any] | None:
    return reply.object if isinstance(reply.object, dict) else None
