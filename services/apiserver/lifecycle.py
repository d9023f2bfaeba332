"""Writes after creation: delete (finalizers, graceful pods, namespaces), status, finalizers, Events.

Every write is decided on the in-memory object and appended with the object's resourceVersion as
the expected last sequence. When the client names a resourceVersion, a stale one is refused with
409 Conflict; otherwise a conflict (a controller appended meanwhile) means: catch up, decide again.
Deleting a Namespace marks it Terminating; the namespace controller (``drain_namespace``, run by
the server in the background) deletes everything in it, then its Events, and removes it once it is
empty. A delete's ``propagationPolicy`` only sets the garbage collector's finalizers
(``strategy.deletion_events``); the garbage collector service does the rest.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence

from msgspec.structs import replace

from draflow.events.api.apiextensions_v1 import CustomObject, CustomResourceDefinition
from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import decode_object, encode_object, object_meta
from draflow.events.api.errors import FORBIDDEN, ApiError, FieldError
from draflow.events.api.registry import custom_crds, lookup_resource, resource_types
from draflow.events.envelope import Event
from draflow.events.objects import (
    EVENT_KIND,
    EventSource,
    KubeEventDeleted,
    KubeEventRecorded,
    ObjectReference,
    make_kube_event,
    object_deleted,
    status_type,
    status_updated,
)
from draflow.infra.eventstore import ConcurrencyError
from draflow.services.apiserver import errors
from draflow.services.apiserver.admission.served import validate_object
from draflow.services.apiserver.crd.objects import admit_custom_status
from draflow.services.apiserver.strategy import (
    PROPAGATION_POLICIES,
    FinalizerForbidden,
    deletion_events,
    finalize_events,
    now_rfc3339,
)
from draflow.services.runtime.protocol import (
    DeleteItem,
    DeleteRequest,
    EventRequest,
    FinalizeRequest,
    ItemResult,
    StatusError,
    StatusRequest,
)
from draflow.services.runtime.store import ApiStore

__all__ = ["PROTECTED_NAMESPACES", "Lifecycle", "resolve_kind"]

PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
MAX_ATTEMPTS = 5
EVENT_TYPES = ("Normal", "Warning")


def resolve_kind(name: str) -> tuple[str, bool]:
    """(Kind, namespaced) for any spelling the registry knows; 404 like kubectl otherwise."""
    if name in (EVENT_KIND, "events", "event", "ev"):
        return EVENT_KIND, True
    rt = lookup_resource(name)
    if rt is None:
        raise StatusError.of(404, "NotFound", f'the server doesn\'t have a resource type "{name}"')
    return rt.kind, rt.namespaced


def _namespace(namespaced: bool, namespace: str) -> str:
    return (namespace or "default") if namespaced else ""


class Lifecycle:
    def __init__(self, store: ApiStore) -> None:
        self.store = store

    def _get(self, kind: str, namespace: str, name: str) -> ApiStruct:
        obj = self.store.index.get(kind, namespace, name)
        if obj is None:
            raise errors.not_found(kind, name)
        return obj

    async def _write(
        self,
        kind: str,
        namespace: str,
        name: str,
        decide: Callable[[ApiStruct], list[Event]],
        resource_version: str = "",
    ) -> ApiStruct | None:
        """Decide on the current object and append; retry on conflicts unless the client named a
        resourceVersion. Returns the object after the write (None once it is gone)."""
        for _ in range(MAX_ATTEMPTS):
            obj = self._get(kind, namespace, name)
            if resource_version and resource_version != object_meta(obj).resource_version:
                if resource_version.isdigit() and int(resource_version) > int(
                    object_meta(obj).resource_version
                ):
                    await self.store.sync(kind, namespace, name)  # the client saw more than we did
                    obj = self._get(kind, namespace, name)
                if resource_version != object_meta(obj).resource_version:
                    raise errors.conflict(kind, name)
            events = decide(obj)
            if not events:
                return obj
            try:
                await self.store.append(kind, namespace, name, events)
            except ConcurrencyError:
                if resource_version:
                    raise errors.conflict(kind, name) from None
                await self.store.sync(kind, namespace, name)
                continue
            return self.store.index.get(kind, namespace, name)
        raise errors.conflict(kind, name)

    # -- delete --------------------------------------------------------------------------------

    async def delete(self, req: DeleteRequest) -> list[ItemResult]:
        policy = req.propagation_policy
        if policy and policy not in PROPAGATION_POLICIES:
            supported = ", ".join(f'"{p}"' for p in (*PROPAGATION_POLICIES, "nil"))
            raise StatusError.of(
                422,
                "Invalid",
                f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
                f'"{policy}": supported values: {supported}',
            )
        if _independent(req.items):
            # objects of their own, each one append: side by side (every write request waits for
            # the apiserver's write lock, so a request of many deletions holds up the others)
            grace = req.grace_period_seconds
            return list(await asyncio.gather(*(self._delete_item(i, grace, policy) for i in req.items)))
        return [await self._delete_item(item, req.grace_period_seconds, policy) for item in req.items]

    async def _delete_item(self, item: DeleteItem, grace: int | None, policy: str) -> ItemResult:
        try:
            return await self._delete_one(item, grace, policy)
        except StatusError as exc:
            return ItemResult(kind=item.kind, namespace=item.namespace, name=item.name, error=exc.status)

    async def _delete_one(self, item: DeleteItem, grace: int | None, policy: str = "") -> ItemResult:
        kind, namespaced = resolve_kind(item.kind)
        if kind == EVENT_KIND:
            raise StatusError.of(405, "MethodNotAllowed", "events are kept in the log and cannot be deleted")
        namespace = _namespace(namespaced, item.namespace)
        obj = self._get(kind, namespace, item.name)
        meta = object_meta(obj)
        if item.uid and item.uid != meta.uid:
            raise errors.conflict(
                kind,
                item.name,
                f"Precondition failed: UID in precondition: {item.uid}, UID in object meta: {meta.uid}",
            )
        if kind == "Namespace":
            if item.name in PROTECTED_NAMESPACES:
                raise errors.forbidden(kind, item.name, "this namespace may not be deleted")
            await self.delete_namespace(item.name)
        elif kind == CustomResourceDefinition.KIND:
            await self._delete_custom_objects(obj)
            now = now_rfc3339()
            await self._write(kind, namespace, item.name, lambda o: deletion_events(o, now, grace, policy))
        else:
            now = now_rfc3339()
            await self._write(
                kind,
                namespace,
                item.name,
                lambda o: deletion_events(o, now, grace, policy),
                item.resource_version,
            )
        left = self.store.index.get(kind, namespace, item.name)
        rv = object_meta(left).resource_version if left is not None else ""
        return ItemResult(
            kind=kind, namespace=namespace, name=item.name, outcome="deleted", resource_version=rv
        )

    async def _delete_custom_objects(self, crd: ApiStruct) -> None:
        """A CRD's objects go before it (upstream's CRD finalizer deletes them the same way; their
        own finalizers do not hold the CRD back here)."""
        rt = next((r for name, r in custom_crds().items() if name == object_meta(crd).name), None)
        if rt is None:
            return
        for obj in self.store.index.items(rt.kind):
            meta = object_meta(obj)
            try:
                await self._write(rt.kind, meta.namespace, meta.name, lambda o: [object_deleted(rt.kind)])
            except StatusError:
                continue  # gone meanwhile

    async def delete_namespace(self, name: str) -> None:
        """Mark the namespace Terminating; ``drain_namespace`` (the namespace controller, run in the
        background as upstream) then deletes what is in it and finally the namespace itself."""
        now = now_rfc3339()
        await self._write("Namespace", "", name, lambda o: deletion_events(_held(o), now))

    async def drain_namespace(self, name: str) -> None:
        """Delete everything in a Terminating namespace; once it is empty, its Events (core/v1 and
        events.k8s.io are one store here) and then the namespace. Events left in a namespace that
        no longer exists (logs written before Events went with their namespace) are deleted too."""
        ns = self.store.index.get("Namespace", "", name)
        if ns is None:
            await self._delete_events(name)
            return
        if object_meta(ns).deletion_timestamp is None:
            return
        now = now_rfc3339()
        for rt in resource_types():
            if not rt.namespaced:
                continue
            for obj in self.store.index.items(rt.kind, name):
                if object_meta(obj).deletion_timestamp is not None:
                    continue  # already on its way out (finalizers, a running pod)
                try:
                    await self._write(rt.kind, name, object_meta(obj).name, lambda o: deletion_events(o, now))
                except StatusError:
                    continue  # gone meanwhile
        if object_meta(ns).finalizers or self.store.index.count_in_namespace(name):
            return
        if not await self._delete_events(name):
            return  # an Event changed meanwhile: the next drain finishes
        try:
            await self._write("Namespace", "", name, lambda o: [object_deleted("Namespace")])
        except StatusError:
            pass  # removed meanwhile

    async def _delete_events(self, namespace: str) -> bool:
        """Delete every Event in ``namespace`` (pipelined appends); False if one changed meanwhile."""
        requests = [
            (
                EVENT_KIND,
                namespace,
                object_meta(ev).name,
                [KubeEventDeleted()],
                int(object_meta(ev).resource_version),
            )
            for ev in self.store.index.items(EVENT_KIND, namespace)
        ]
        outcomes = await self.store.append_many(requests)
        return not any(isinstance(o, BaseException) for o in outcomes)

    # -- status and finalizers ---------------------------------------------------------------------

    async def update_status(self, req: StatusRequest) -> ApiStruct | None:
        kind, namespaced = resolve_kind(req.kind)
        rt = lookup_resource(kind)
        if rt is not None and rt.crd and rt.status_subresource:
            return await self._custom_status(kind, namespaced, rt.crd, req)
        if kind == EVENT_KIND or status_type(kind) is None:
            raise StatusError.of(
                404, "NotFound", f"the server could not find the requested resource ({kind}/status)"
            )
        namespace = _namespace(namespaced, req.namespace)

        def decide(obj: ApiStruct) -> list[Event]:
            manifest = encode_object(obj)
            manifest["status"] = req.status
            name = object_meta(obj).name
            try:
                decoded = decode_object(manifest)
            except ApiError as exc:
                raise errors.from_api_error(exc, obj.API_VERSION, kind, name, namespace) from None
            except (ValueError, TypeError, RecursionError) as exc:
                raise errors.bad_request(f"cannot decode the status of {kind} {name!r}: {exc}") from None
            status = getattr(decoded, "status", None)
            new = replace(obj, status=status)
            problems = validate_object(new, obj)
            if problems:
                raise errors.invalid(kind, name, problems, namespace)
            return [] if status == getattr(obj, "status", None) else [status_updated(kind, status)]

        return await self._write(kind, namespace, req.name, decide, req.resource_version)

    async def _custom_status(
        self, kind: str, namespaced: bool, crd_name: str, req: StatusRequest
    ) -> ApiStruct | None:
        """The status subresource of a custom object: the whole object is checked by its schema
        with the new status (everything else as stored)."""
        namespace = _namespace(namespaced, req.namespace)
        crd = self.store.index.get(CustomResourceDefinition.KIND, "", crd_name)

        def decide(obj: ApiStruct) -> list[Event]:
            assert isinstance(obj, CustomObject) and isinstance(crd, CustomResourceDefinition)
            name = obj.metadata.name
            try:
                admitted = admit_custom_status(obj, req.status, crd)
            except ApiError as exc:
                raise errors.from_api_error(exc, obj.api_version, kind, name, namespace) from None
            status = admitted.content.get("status")
            return [] if status == obj.content.get("status") else [status_updated(kind, status)]

        return await self._write(kind, namespace, req.name, decide, req.resource_version)

    async def finalize(self, req: FinalizeRequest) -> ApiStruct | None:
        kind, namespaced = resolve_kind(req.kind)
        namespace = _namespace(namespaced, req.namespace)

        def decide(obj: ApiStruct) -> list[Event]:
            try:
                return finalize_events(obj, req.add, req.remove)
            except FinalizerForbidden as exc:
                raise errors.invalid(
                    kind, req.name, [_finalizer_error(kind, obj, str(exc))], namespace
                ) from None

        return await self._write(kind, namespace, req.name, decide, req.resource_version)

    # -- Kubernetes Events -------------------------------------------------------------------------

    async def record_event(self, req: EventRequest) -> ApiStruct:
        kind, namespaced = resolve_kind(req.kind)
        namespace = _namespace(namespaced, req.namespace)
        if self.store.index.get("Namespace", "", namespace or "default") is None:
            raise errors.namespace_not_found(namespace or "default")  # deleted with its Events
        if req.type not in EVENT_TYPES:
            raise StatusError.of(
                422, "Invalid", f'Event "{req.reason}" is invalid: type: Unsupported value: "{req.type}"'
            )
        if not req.reason:
            raise StatusError.of(422, "Invalid", "Event is invalid: reason: Required value")
        involved = self.store.index.get(kind, namespace, req.name)
        meta = object_meta(involved) if involved is not None else None
        ref = ObjectReference(
            kind=kind,
            namespace=namespace,
            name=req.name,
            uid=meta.uid if meta else "",
            api_version=involved.API_VERSION if involved is not None else "",
            resource_version=meta.resource_version if meta else "",
        )
        source = EventSource(component=req.component, host=req.host)
        ev = make_kube_event(
            ref,
            type_=req.type,
            reason=req.reason,
            message=req.message[:1024],
            source=source,
            now=now_rfc3339(),
            uid=str(uuid.uuid4()),
            reporting_instance=req.reporting_instance,
        )
        ns, name = ev.metadata.namespace, ev.metadata.name
        await self.store.append(EVENT_KIND, ns, name, [KubeEventRecorded(event=ev)], unchecked=True)
        stored = self.store.index.get(EVENT_KIND, ns, name)
        return stored if stored is not None else ev


def _held(ns: ApiStruct) -> ApiStruct:
    """A namespace is always deleted in two steps (Terminating first), like one with a finalizer."""
    meta = object_meta(ns)
    if meta.finalizers:
        return ns
    return replace(ns, metadata=replace(meta, finalizers=("kubernetes",)))


def _finalizer_error(kind: str, obj: ApiStruct, message: str) -> FieldError:
    meta = object_meta(obj)
    return FieldError(
        kind=kind,
        namespace=meta.namespace,
        name=meta.name,
        path="metadata.finalizers",
        type=FORBIDDEN,
        rule=f"{FORBIDDEN}: {message}",
    )


def _independent(items: Sequence[DeleteItem]) -> bool:
    """Whether deleting ``items`` one after the other and all at once must end the same: several
    objects, each named once, none a Namespace or a CustomResourceDefinition (their deletion
    touches other objects)."""
    if len(items) < 2:
        return False
    keys = set()
    for item in items:
        try:
            kind, namespaced = resolve_kind(item.kind)
        except StatusError:
            return False
        if kind in ("Namespace", CustomResourceDefinition.KIND):
            return False
        keys.add((kind, _namespace(namespaced, item.namespace), item.name))
    return len(keys) == len(items)
