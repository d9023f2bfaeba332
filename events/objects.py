"""What happens to API objects stored in the log: the object lifecycle events and Kubernetes Events.

User-applied objects are the one place where the log holds whole objects rather than domain facts.
For every served kind ``K`` (``draflow.events.api.registry.resource_types()``) this module defines, on the
aggregate subject ``<root>.ev.K.<namespace>.<name>``:

* ``KApplied{object}``: a user created or changed the object (apply / create). ``object`` is the
  object as admitted: defaulted, with the server's metadata (uid, creationTimestamp, generation,
  finalizers as merged). Its ``status`` counts only when the event creates the object; on an
  update the stored status is kept (status is written with the next event type, as the status
  subresource upstream).
* ``KStatusUpdated{status}``: a controller replaced the whole status (kinds that have one).
* ``KFinalizersChanged{finalizers}``: the finalizer list was changed.
* ``KDeletionRequested{deletion_timestamp, grace_period_seconds}``: deletion started but
  finalizers (or a running pod's grace period) keep the object.
* ``KDeleted{}``: the object is gone.

The classes are generated (one per kind and verb) so that the tag names the kind
(``ResourceClaimApplied``) and msgspec decodes ``object`` straight into the kind's Struct. Use the
constructors below rather than the classes. Domain events written by controllers
(``ClaimAllocated``...) are ordinary hand-written Event classes on the same subjects; see
``draflow.projections.objects`` for how their reducers join the object fold.

``KubeEventRecorded{event}`` records a core/v1 Event (Normal/Warning, reason, message, involved
object, source) on ``<root>.ev.Event.<namespace>.<name>``; a repeat of the same event (same
involved object, type, reason, message and source) lands on the same subject and bumps ``count``.
``KubeEventDeleted{}`` removes a recorded Event (its namespace was deleted: the namespace controller
deletes every Event in it, as upstream's does).

Custom objects (kinds served by a CustomResourceDefinition, known only at run time) use five
fixed classes instead, ``CustomObjectApplied`` ... ``CustomObjectDeleted``: the subject names the
kind, so the union of event types stays static; the constructors below pick them for such kinds.

``OwnerReferencesRemoved{owner_uids}`` works on the subject of any kind: the garbage collector
orphaned the object (its owner was deleted with ``propagationPolicy: Orphan``) or dropped
references to owners that are gone while another owner keeps it alive. ``ORPHAN_FINALIZER`` and
``FOREGROUND_FINALIZER`` are the finalizers a delete with that propagation policy puts on the owner.
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

import msgspec

from draflow.events.api.apiextensions_v1 import CustomObject
from draflow.events.api.base import ApiStruct
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.registry import lookup_resource, resource_types
from draflow.events.envelope import Event

__all__ = [
    "APPLIED",
    "CUSTOM_EVENT_TYPES",
    "DELETED",
    "DELETION_REQUESTED",
    "EVENT_KIND",
    "FINALIZERS_CHANGED",
    "FOREGROUND_FINALIZER",
    "ORPHAN_FINALIZER",
    "STATUS_UPDATED",
    "VERBS",
    "CustomObjectApplied",
    "CustomObjectDeleted",
    "CustomObjectDeletionRequested",
    "CustomObjectFinalizersChanged",
    "CustomObjectStatusUpdated",
    "EventSource",
    "KubeEvent",
    "KubeEventDeleted",
    "KubeEventRecorded",
    "ObjectReference",
    "OwnerReferencesRemoved",
    "custom_verb",
    "decode_stored",
    "deletion_requested",
    "event_name",
    "finalizers_changed",
    "kind_and_verb",
    "make_kube_event",
    "object_applied",
    "object_deleted",
    "object_event_type",
    "object_event_types",
    "status_type",
    "status_updated",
]

APPLIED = "Applied"
STATUS_UPDATED = "StatusUpdated"
FINALIZERS_CHANGED = "FinalizersChanged"
DELETION_REQUESTED = "DeletionRequested"
DELETED = "Deleted"
VERBS = (APPLIED, STATUS_UPDATED, FINALIZERS_CHANGED, DELETION_REQUESTED, DELETED)

EVENT_KIND = "Event"  # the aggregate kind of recorded Kubernetes Events

# metav1.FinalizerOrphanDependents / FinalizerDeleteDependents: set by a delete with
# propagationPolicy Orphan / Foreground, removed by the garbage collector when it is done.
ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"

# (kind, verb) -> generated class; type name -> (kind, verb)
_TYPES: dict[tuple[str, str], type[Event]] = {}
_BY_NAME: dict[str, tuple[str, str]] = {}
_STATUS: dict[str, Any] = {}  # kind -> status Struct type (kinds with a status)


def _fields(kind: str, verb: str, struct: type[ApiStruct]) -> list[tuple[str, Any, Any]] | None:
    if verb == APPLIED:
        return [("object", struct, msgspec.NODEFAULT)]
    if verb == STATUS_UPDATED:
        st = _STATUS.get(kind)
        return None if st is None else [("status", st, msgspec.NODEFAULT)]
    if verb == FINALIZERS_CHANGED:
        return [("finalizers", tuple[str, ...], ())]
    if verb == DELETION_REQUESTED:
        return [("deletion_timestamp", str, msgspec.NODEFAULT), ("grace_period_seconds", int, 0)]
    return []


def _define(kind: str, struct: type[ApiStruct]) -> None:
    for field in msgspec.structs.fields(struct):
        if field.name == "status":
            _STATUS[kind] = field.type
    for verb in VERBS:
        fields = _fields(kind, verb, struct)
        if fields is None:
            continue
        name = f"{kind}{verb}"
        cls: type[Event] = msgspec.defstruct(  # type: ignore[assignment]
            name,
            fields,
            bases=(Event,),
            module=__name__,
            namespace={
                "KIND": kind,
                "VERB": verb,
                "__annotations__": {"KIND": ClassVar[str], "VERB": ClassVar[str]},
            },
            frozen=True,
            kw_only=True,
        )
        _TYPES[(kind, verb)] = cls
        _BY_NAME[name] = (kind, verb)


for _rt in resource_types():
    _define(_rt.kind, _rt.struct)


class CustomObjectApplied(Event, frozen=True, kw_only=True):
    """A custom object was created or changed (``KApplied`` for a CRD's kind)."""

    object: CustomObject


class CustomObjectStatusUpdated(Event, frozen=True, kw_only=True):
    """A custom object's ``status`` was replaced through the status subresource."""

    status: Any = None


class CustomObjectFinalizersChanged(Event, frozen=True, kw_only=True):
    finalizers: tuple[str, ...] = ()


class CustomObjectDeletionRequested(Event, frozen=True, kw_only=True):
    deletion_timestamp: str
    grace_period_seconds: int = 0


class CustomObjectDeleted(Event, frozen=True, kw_only=True):
    """A custom object is gone."""


_CUSTOM: dict[str, type[Event]] = {
    APPLIED: CustomObjectApplied,
    STATUS_UPDATED: CustomObjectStatusUpdated,
    FINALIZERS_CHANGED: CustomObjectFinalizersChanged,
    DELETION_REQUESTED: CustomObjectDeletionRequested,
    DELETED: CustomObjectDeleted,
}
CUSTOM_EVENT_TYPES: tuple[type[Event], ...] = tuple(_CUSTOM.values())
_CUSTOM_VERBS = {cls.type_name(): verb for verb, cls in _CUSTOM.items()}


def _is_custom(kind: str) -> bool:
    rt = lookup_resource(kind) if (kind, APPLIED) not in _TYPES else None
    return rt is not None and bool(rt.crd)


def object_event_types() -> tuple[type[Event], ...]:
    """The generated lifecycle event classes, one per served kind and verb (``draflow.events.union``)."""
    return tuple(_TYPES.values())


def object_event_type(kind: str, verb: str) -> type[Event]:
    """The class for ``kind`` and ``verb``: generated for a built-in kind, ``CustomObject*`` for
    a kind a CRD serves now (KeyError for an unserved kind)."""
    cls = _TYPES.get((kind, verb))
    if cls is None and _is_custom(kind):
        return _CUSTOM[verb]
    if cls is None:
        raise KeyError((kind, verb))
    return cls


def kind_and_verb(type_name: str) -> tuple[str, str] | None:
    """``("ResourceClaim", "Applied")`` for ``ResourceClaimApplied``; None for other events
    (``CustomObject*`` name no kind: ``custom_verb`` gives their verb)."""
    return _BY_NAME.get(type_name)


def custom_verb(type_name: str) -> str | None:
    """``"Applied"`` for ``CustomObjectApplied``...; None for other events."""
    return _CUSTOM_VERBS.get(type_name)


def status_type(kind: str) -> Any:
    """The status Struct of a kind, or None when the kind has no status (custom objects keep
    their status inside ``content``)."""
    return _STATUS.get(kind)


def object_applied(obj: ApiStruct) -> Event:
    if isinstance(obj, CustomObject):
        return CustomObjectApplied(object=obj)
    return _TYPES[(obj.KIND, APPLIED)](object=obj)


def status_updated(kind: str, status: Any) -> Event:
    return object_event_type(kind, STATUS_UPDATED)(status=status)


def finalizers_changed(kind: str, finalizers: tuple[str, ...]) -> Event:
    return object_event_type(kind, FINALIZERS_CHANGED)(finalizers=finalizers)


def deletion_requested(kind: str, deletion_timestamp: str, grace_period_seconds: int = 0) -> Event:
    cls = object_event_type(kind, DELETION_REQUESTED)
    return cls(deletion_timestamp=deletion_timestamp, grace_period_seconds=grace_period_seconds)


def object_deleted(kind: str) -> Event:
    return object_event_type(kind, DELETED)()


# -- Kubernetes Events (core/v1 Event) -----------------------------------------------------------


class ObjectReference(ApiStruct, frozen=True):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""
    api_version: str = ""
    resource_version: str = ""
    field_path: str = ""


class EventSource(ApiStruct, frozen=True):
    component: str = ""
    host: str = ""


class KubeEvent(ApiStruct, frozen=True):
    """core/v1 Event, as ``kubectl get events -o yaml`` shows it."""

    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Event"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    involved_object: ObjectReference = msgspec.field(default_factory=ObjectReference)
    reason: str = ""
    message: str = ""
    source: EventSource = msgspec.field(default_factory=EventSource)
    first_timestamp: str | None = None
    last_timestamp: str | None = None
    count: int = 0
    type: str = ""
    reporting_component: str = ""
    reporting_instance: str = ""


class KubeEventRecorded(Event, frozen=True, kw_only=True):
    """A Kubernetes Event was recorded (or repeated: the fold adds ``count`` to the stored one)."""

    event: KubeEvent


class KubeEventDeleted(Event, frozen=True, kw_only=True):
    """A recorded Kubernetes Event was deleted (with its namespace)."""


class OwnerReferencesRemoved(Event, frozen=True, kw_only=True):
    """The garbage collector removed the object's ownerReferences to these owner uids."""

    owner_uids: tuple[str, ...] = ()


def event_name(
    involved: ObjectReference,
    type_: str,
    reason: str,
    message: str,
    source: EventSource,
    reporting_instance: str = "",
) -> str:
    """Deterministic Event name: same involved object and content -> same name (aggregation).

    A reporting instance other than the source host is part of the key: each instance of a
    component aggregates its own Events (upstream's recorders aggregate per process), so two
    scheduler instances saying the same thing stay two Events, each naming its reporter."""
    parts = [
        involved.kind,
        involved.namespace,
        involved.name,
        involved.uid,
        type_,
        reason,
        message,
        source.component,
    ]
    if reporting_instance and reporting_instance != source.host:
        parts.append(reporting_instance)
    key = "\x00".join(parts)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{involved.name[:236]}.{digest}"


def decode_stored(manifest: Any) -> ApiStruct:
    """Any object the apiserver returns (served kinds and Events) back into its Struct."""
    if (
        isinstance(manifest, dict)
        and manifest.get("kind") == EVENT_KIND
        and manifest.get("apiVersion") == "v1"
    ):
        body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
        return msgspec.convert(body, KubeEvent)
    from draflow.events.api.codec import decode_object

    return decode_object(manifest)


def make_kube_event(
    involved: ObjectReference,
    *,
    type_: str,
    reason: str,
    message: str,
    source: EventSource,
    now: str,
    uid: str,
    reporting_instance: str = "",
) -> KubeEvent:
    """A new core/v1 Event about ``involved``; it lives in the involved object's namespace
    (``default`` for cluster-scoped objects, as upstream). ``reportingInstance`` is
    ``reporting_instance`` when given, else the source host (the kubelet's node)."""
    namespace = involved.namespace or "default"
    meta = ObjectMeta(
        name=event_name(involved, type_, reason, message, source, reporting_instance),
        namespace=namespace,
        uid=uid,
        creation_timestamp=now,
    )
    return KubeEvent(
        metadata=meta,
        involved_object=involved,
        reason=reason,
        message=message,
        source=source,
        first_timestamp=now,
        last_timestamp=now,
        count=1,
        type=type_,
        reporting_component=source.component,
        reporting_instance=reporting_instance or source.host,
    )
