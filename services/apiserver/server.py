"""The apiserver service: answers ``<root>.api.<verb>`` requests from its in-memory store.

Requests arrive on one queue-group subscription (several apiservers may share the load; they
agree through the log's optimistic concurrency) and each is handled in its own task. Reads (get,
list) are served from memory at once; writes are serialised by one lock, so decisions within one
process never race, and appended with the object's version as the expected last sequence. Any
failure becomes a Status reply: a client never sees a traceback.

A replica (``requests=False``) takes no NATS requests and runs no namespace controller or Event
expiry: it is the process behind a separate Kubernetes API endpoint (``--kube-api-only``), whose
watchers and LISTs then cost the control plane's apiserver nothing; its writes still go through
this admission, agreeing with the other apiservers through the log.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import decode_object, encode_object, object_meta, to_json
from draflow.events.objects import EVENT_KIND, object_applied
from draflow.infra import tracing
from draflow.infra.auth.roles import KUBELET_PREFIX
from draflow.infra.eventstore import ConcurrencyError, EventStore, acting_for
from draflow.projections.objects import Change
from draflow.services.apiserver import errors
from draflow.services.apiserver.admission import apply_defaults
from draflow.services.apiserver.admission.cel import cel_expressions, precheck
from draflow.services.apiserver.admission.tolerations import DefaultTolerationSeconds
from draflow.services.apiserver.apply import Applier
from draflow.services.apiserver.event_ttl import EventExpiry, ttl_from_env
from draflow.services.apiserver.lifecycle import Lifecycle, resolve_kind
from draflow.services.apiserver.noderestriction import NodeRestriction, decode_events
from draflow.services.apiserver.quota import QuotaAdmission
from draflow.services.apiserver.strategy import now_rfc3339, stamp_create
from draflow.services.runtime.protocol import (
    ACTING_FOR_HEADER,
    REQUEST_TYPES,
    AppendEventsRequest,
    ApplyRequest,
    DeleteRequest,
    EventRequest,
    FinalizeRequest,
    GetRequest,
    ListRequest,
    Reply,
    Status,
    StatusError,
    StatusRequest,
    api_subject,
    kube_api_subject,
    node_api_subject,
    node_of_subject,
)
from draflow.services.runtime.selectors import SelectorError, parse_field_selector, parse_label_selector
from draflow.services.runtime.store import ApiStore

__all__ = ["ApiServer"]

log = logging.getLogger(__name__)

BOOTSTRAP_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_encoder = msgspec.json.Encoder()
_REPLY_HEADROOM = 64 * 1024  # bytes kept free under the server's max payload for the envelope


def _raw(obj: ApiStruct) -> msgspec.Raw:
    return msgspec.Raw(to_json(obj))


# writes get a SERVER span (a child of the caller's span when the request carries a traceparent);
# reads (get, list) would only add noise to every controller's trace
_TRACED_VERBS = frozenset({"apply", "create", "delete", "status", "finalize", "event", "append"})
# kinds whose validation checks CEL selectors
_CEL_KINDS = frozenset({"DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "DeviceTaintRule"})


class ApiServer:
    def __init__(
        self,
        events: EventStore,
        *,
        tolerations: DefaultTolerationSeconds | None = None,
        event_ttl_s: float | None = None,
        requests: bool = True,
    ) -> None:
        """``event_ttl_s``: how long an Event lives after it last happened (None: the environment's
        ``DRAFLOW_EVENT_TTL_S``, default an hour; 0: forever). ``requests``: False for a replica
        (module docstring)."""
        self.events = events
        self.requests = requests
        self.store = ApiStore(events, snapshot_writer=requests)
        self.event_expiry = EventExpiry(self.store, ttl_from_env() if event_ttl_s is None else event_ttl_s)
        self.quota = QuotaAdmission()
        self.store.listen(self.quota.on_change)
        self.applier = Applier(self.store, self.quota, tolerations)
        self.lifecycle = Lifecycle(self.store)
        self._write_lock = asyncio.Lock()
        self._sub: Subscription | None = None
        self._node_sub: Subscription | None = None
        self._kube_sub: Subscription | None = None
        self.nodes = NodeRestriction(self.store.index)
        self._tasks: set[asyncio.Task[None]] = set()
        self._terminating: set[str] = set()
        self._ns_wake = asyncio.Event()
        self._ns_task: asyncio.Task[None] | None = None
        self._expiry_task: asyncio.Task[None] | None = None
        self._handlers: dict[str, Callable[[Any], Awaitable[Reply]]] = {
            "apply": lambda r: self._apply(r, create_only=False),
            "create": lambda r: self._apply(r, create_only=True),
            "get": self._get,
            "list": self._list,
            "delete": self._delete,
            "status": self._status,
            "finalize": self._finalize,
            "event": self._event,
        }

    async def start(self) -> None:
        if self.requests:
            self.store.listen(self._on_change)
        await self.store.start()
        if not self.requests:
            log.info("apiserver replica ready (log at %d)", self.store.position)
            return
        await self._bootstrap()
        self._orphaned_events()
        self._ns_task = asyncio.create_task(self._namespace_controller(), name="apiserver-namespaces")
        self._expiry_task = asyncio.create_task(self.event_expiry.run(), name="apiserver-event-ttl")
        subject = api_subject(self.events.root, "*")
        self._sub = await self.events.nc.subscribe(subject, queue="apiserver", cb=self._on_request)
        # the kubelets' requests: the subject names the node, and only its credential may send there
        nodes = node_api_subject(self.events.root, "*", "*")
        self._node_sub = await self.events.nc.subscribe(nodes, queue="apiserver", cb=self._on_request)
        # the Kubernetes API replica's writes, each for the user its header names
        kube = kube_api_subject(self.events.root, "*")
        self._kube_sub = await self.events.nc.subscribe(kube, queue="apiserver", cb=self._on_request)
        log.info("apiserver ready on %s, %s and %s (log at %d)", subject, nodes, kube, self.store.position)

    async def stop(self) -> None:
        for sub in (self._sub, self._node_sub, self._kube_sub):
            if sub is not None:
                await sub.unsubscribe()
        self._sub = self._node_sub = self._kube_sub = None
        for task in [*self._tasks, self._ns_task, self._expiry_task]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for background in (self._ns_task, self._expiry_task):
            if background is not None:
                await asyncio.gather(background, return_exceptions=True)
        await self.store.stop()

    async def _bootstrap(self) -> None:
        """Create the namespaces every cluster has, once (the first apiserver to try wins)."""
        for name in BOOTSTRAP_NAMESPACES:
            if self.store.index.version("Namespace", "", name):
                continue
            ns = decode_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            ns = stamp_create(apply_defaults(ns), uid=f"namespace-{name}", now=now_rfc3339())
            try:
                await self.store.append(
                    "Namespace",
                    "",
                    name,
                    [object_applied(ns)],
                    expected_last_seq=0,
                    msg_id=f"bootstrap-ns-{name}",
                )
            except ConcurrencyError:
                await self.store.sync("Namespace", "", name)

    # -- the namespace controller ----------------------------------------------------------------

    def _on_change(self, kind: str, namespace: str, name: str, change: Change) -> None:
        if change.type == "DELETED" and namespace:
            ns = self.store.index.get("Namespace", "", namespace)
            if ns is not None and object_meta(ns).deletion_timestamp is not None:
                self._terminating.add(namespace)
                self._ns_wake.set()
        elif (
            kind == "Namespace"
            and change.type != "DELETED"  # ADDED: a terminating namespace in the snapshot loaded
            and object_meta(change.object).deletion_timestamp
        ):
            self._terminating.add(name)
            self._ns_wake.set()

    def _orphaned_events(self) -> None:
        """Namespaces gone while their Events stayed (logs from before Events went with their
        namespace): the namespace controller deletes those Events at start."""
        namespaces = {object_meta(ev).namespace for ev in self.store.index.items(EVENT_KIND)}
        gone = {ns for ns in namespaces if self.store.index.get("Namespace", "", ns) is None}
        if gone:
            self._terminating |= gone
            self._ns_wake.set()

    async def _namespace_controller(self) -> None:
        while True:
            await self._ns_wake.wait()
            self._ns_wake.clear()
            pending, self._terminating = self._terminating, set()
            for ns in sorted(pending):
                try:
                    async with self._write_lock:
                        await self.lifecycle.drain_namespace(ns)
                except Exception:
                    log.exception("finishing namespace %s failed", ns)

    # -- requests ------------------------------------------------------------------------------

    async def _on_request(self, msg: Msg) -> None:
        task = asyncio.create_task(self._handle(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, msg: Msg) -> None:
        verb = msg.subject.rsplit(".", 1)[-1]
        node = node_of_subject(msg.subject) if msg.subject.startswith(self._node_prefix) else ""
        if msg.subject.startswith(self._kube_prefix):
            # only the replica's credential may publish here: the user it names is who writes
            acting_for.set((msg.headers or {}).get(ACTING_FOR_HEADER) or None)
        if verb in _TRACED_VERBS:
            attrs = {"rpc.system": "nats", "rpc.method": verb, "messaging.destination.name": msg.subject}
            with tracing.server_span(f"api {verb}", msg.headers, attrs):
                reply = await self.handle(verb, msg.data, node=node)
        else:
            reply = await self.handle(verb, msg.data, node=node)
        if not msg.reply:
            return
        data = _encoder.encode(reply)
        limit = self.events.nc.max_payload
        if len(data) > limit:
            err = StatusError.of(413, "RequestEntityTooLarge", f"reply of {len(data)} bytes exceeds {limit}")
            data = _encoder.encode(Reply(error=err.status))
        try:
            await msg.respond(data)
        except Exception:
            log.exception("cannot reply to %s", msg.subject)

    @property
    def _node_prefix(self) -> str:
        return f"{self.events.root}.node."

    @property
    def _kube_prefix(self) -> str:
        return f"{self.events.root}.kapi."

    async def handle(self, verb: str, data: bytes, *, node: str = "") -> Reply:
        """One request (raw JSON) to one reply; never raises. ``node``: the request came from
        that node's kubelet (NodeRestriction admits it first; only nodes append events)."""
        handler: Callable[[Any], Awaitable[Reply]] | None = self._handlers.get(verb)
        if verb == "append" and node:
            handler = functools.partial(self._append, node)
        req_type = REQUEST_TYPES.get(verb)
        if handler is None or req_type is None:
            return Reply(error=Status(code=404, reason="NotFound", message=f"unknown verb {verb!r}"))
        try:
            req = msgspec.json.decode(data, type=req_type)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError) as exc:
            return Reply(
                error=Status(code=400, reason="BadRequest", message=f"invalid {verb} request: {exc}")
            )
        try:
            if node:
                await self._sync_for_node(verb, req)
                self.nodes.admit(node, verb, req)
            return await handler(req)
        except StatusError as exc:
            return Reply(error=exc.status)
        except TimeoutError:
            return Reply(
                error=Status(code=504, reason="Timeout", message="the server timed out waiting for the log")
            )
        except nats.errors.MaxPayloadError as exc:
            return Reply(
                error=Status(code=413, reason="RequestEntityTooLarge", message=f"too large to store: {exc}")
            )
        except Exception as exc:
            log.exception("%s request failed", verb)
            return Reply(error=errors.internal(f"{type(exc).__name__}: {exc}").status)

    async def _sync_for_node(self, verb: str, req: Any) -> None:
        """Admit a node's write on the objects as the log has them now, not as this apiserver
        last folded them (the kubelet may have seen the pod's binding first)."""
        if isinstance(req, AppendEventsRequest | StatusRequest | FinalizeRequest):
            kind, namespaced = resolve_kind(req.kind)
            await self.store.sync(kind, (req.namespace or "default") if namespaced else "", req.name)
        elif isinstance(req, DeleteRequest):
            for item in req.items:
                kind, namespaced = resolve_kind(item.kind)
                await self.store.sync(kind, (item.namespace or "default") if namespaced else "", item.name)

    async def _append(self, node: str, req: AppendEventsRequest) -> Reply:
        """A kubelet's domain facts on one object (admitted), in its name, at its version."""
        kind, namespaced = resolve_kind(req.kind)
        namespace = (req.namespace or "default") if namespaced else ""
        try:
            seq = await self.store.append(
                kind,
                namespace,
                req.name,
                decode_events(req.events),
                expected_last_seq=req.expected_last_seq,
                msg_id=req.msg_id or None,
                actor=f"{KUBELET_PREFIX}{node}",
            )
        except ConcurrencyError as exc:
            raise StatusError.of(409, "Conflict", str(exc)) from None
        return Reply(resource_version=seq)

    async def _apply(self, req: ApplyRequest, create_only: bool) -> Reply:
        # user CEL is checked on the admission worker thread, not on this loop (see admission.cel)
        await precheck(cel_expressions([item.manifest for item in req.items]))
        async with self._write_lock:
            return Reply(
                results=await self.applier.apply(req, create_only), resource_version=self.store.position
            )

    async def _delete(self, req: DeleteRequest) -> Reply:
        async with self._write_lock:
            return Reply(results=await self.lifecycle.delete(req))

    async def _status(self, req: StatusRequest) -> Reply:
        await self._precheck_stored(req.kind, req.namespace, req.name)
        async with self._write_lock:
            obj = await self.lifecycle.update_status(req)
        return Reply(object=_raw(obj) if obj is not None else None)

    async def _precheck_stored(self, kind_name: str, namespace: str, name: str) -> None:
        """A status write validates the stored object, selectors included: check them off-loop
        (usually already remembered from the object's admission)."""
        try:
            kind, namespaced = resolve_kind(kind_name)
        except StatusError:
            return  # the handler reports it
        if kind not in _CEL_KINDS:
            return
        obj = self.store.index.get(kind, (namespace or "default") if namespaced else "", name)
        if obj is not None:
            await precheck(cel_expressions(encode_object(obj)))

    async def _finalize(self, req: FinalizeRequest) -> Reply:
        async with self._write_lock:
            obj = await self.lifecycle.finalize(req)
        return Reply(object=_raw(obj) if obj is not None else None)

    async def _event(self, req: EventRequest) -> Reply:
        async with self._write_lock:
            obj = await self.lifecycle.record_event(req)
        return Reply(object=_raw(obj))

    async def _get(self, req: GetRequest) -> Reply:
        kind, namespaced = resolve_kind(req.kind)
        if req.min_resource_version:
            await self.store.wait_position(req.min_resource_version)
        namespace = (req.namespace or "default") if namespaced else ""
        obj = self.store.index.get(kind, namespace, req.name)
        if obj is None:
            raise errors.not_found(kind, req.name)
        return Reply(object=_raw(obj), resource_version=self.store.position)

    async def _list(self, req: ListRequest) -> Reply:
        kind, namespaced = resolve_kind(req.kind)
        if req.min_resource_version:
            await self.store.wait_position(req.min_resource_version)
        try:
            labels = parse_label_selector(req.label_selector)
            _, fields = parse_field_selector(req.field_selector)
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from None
        namespace = (req.namespace or "default") if namespaced and req.namespace is not None else None
        after = tuple(req.continue_.split("/", 1)) if req.continue_ else None
        budget = self.events.nc.max_payload - _REPLY_HEADROOM
        items: list[msgspec.Raw] = []
        last: tuple[str, str] | None = None
        position = self.store.position
        for obj in self.store.index.items(kind, namespace):
            meta = object_meta(obj)
            key = (meta.namespace, meta.name)
            if after is not None and key <= after:
                continue
            if not labels(meta.labels):
                continue
            if req.field_selector and not fields(encode_object(obj)):
                continue
            raw = _raw(obj)
            budget -= len(raw) + 1
            if items and (budget < 0 or (req.limit and len(items) >= req.limit)):
                return Reply(
                    items=items, resource_version=position, continue_=f"{last[0]}/{last[1]}" if last else ""
                )
            items.append(raw)
            last = key
        return Reply(items=items, resource_version=position)
