"""The apiserver's wire protocol: JSON (msgspec) request/reply on ``<root>.api.<verb>``.

Every reply is a :class:`Reply`: the object(s) or per-item results, or a Kubernetes ``Status``-like
error ``{code, reason, message, causes}`` (``causes`` lists field errors). Objects travel as their
``-o json`` form (``apiVersion``/``kind`` first, storage version v1). Verbs and their requests:

=============  ===================  ============================================================
verb           request              reply
=============  ===================  ============================================================
``apply``      ApplyRequest         ``results``: one ItemResult per manifest (created/configured/
                                    unchanged or an error); ``create`` = the same, create only
``get``        GetRequest           ``object``
``list``       ListRequest          ``items`` + ``resource_version`` (+ ``continue_`` to page on)
``delete``     DeleteRequest        ``results`` (deleted, or the object kept by finalizers)
``status``     StatusRequest        ``object`` after a status write (409 on a stale resourceVersion)
``finalize``   FinalizeRequest      ``object`` after adding/removing finalizers
``event``      EventRequest         ``object``: the recorded (or aggregated) core/v1 Event
``append``     AppendEventsRequest  ``resource_version``: the last appended event's sequence
               (nodes only)
=============  ===================  ============================================================

A kubelet sends the same verbs on ``<root>.node.<node>.<verb>`` instead: only that node's
credential may publish there (``draflow.infra.auth.roles``), so the apiserver knows which node asks and
admits the request with NodeRestriction (``draflow.services.apiserver.noderestriction``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from draflow.events.api.registry import lookup_resource
from draflow.events.objects import EVENT_KIND
from draflow.events.subjects import decode_token, encode_token

__all__ = [
    "ACTING_FOR_HEADER",
    "NODE_VERBS",
    "VERBS",
    "AppendEventsRequest",
    "ApplyRequest",
    "Cause",
    "DeleteItem",
    "DeleteRequest",
    "EventRequest",
    "FinalizeRequest",
    "GetRequest",
    "ItemResult",
    "ListRequest",
    "Reply",
    "ReplyIn",
    "Status",
    "StatusError",
    "StatusRequest",
    "api_subject",
    "kube_api_subject",
    "node_api_subject",
    "node_of_subject",
    "qualified_resource",
]

VERBS = ("apply", "create", "get", "list", "delete", "status", "finalize", "event")
NODE_VERBS = (*VERBS, "append")


def api_subject(root: str, verb: str) -> str:
    return f"{root}.api.{verb}"


# the Kubernetes API replica's requests (``--kube-api-only``): only its credential may publish on
# ``kube_api_subject``, so the apiserver trusts the header naming the user the write is for
ACTING_FOR_HEADER = "Draflow-Acting-For"


def kube_api_subject(root: str, verb: str) -> str:
    """Where the Kubernetes API replica forwards a write (``*``: the server's side)."""
    return f"{root}.kapi.{verb}"


def node_api_subject(root: str, node: str, verb: str) -> str:
    """Where node ``node``'s kubelet sends ``verb`` (``*`` for both wildcards: the server's side)."""
    return f"{root}.node.{node if node == '*' else encode_token(node)}.{verb}"


def node_of_subject(subject: str) -> str:
    """The node a node-API request came from (its subject's second-last token)."""
    return decode_token(subject.rsplit(".", 2)[-2])


class Cause(msgspec.Struct, kw_only=True, omit_defaults=True):
    field: str = ""
    reason: str = ""
    message: str = ""


class Status(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A refusal, as Kubernetes' metav1.Status: HTTP-like code, machine reason, human message."""

    code: int
    reason: str
    message: str
    causes: list[Cause] = []


class StatusError(Exception):
    """A request refused with a Status (raised by handlers and by the client)."""

    operation: str = ""  # "create" or "update" when known (apply reports it per item)

    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status

    @classmethod
    def of(cls, code: int, reason: str, message: str, causes: list[Cause] | None = None) -> StatusError:
        return cls(Status(code=code, reason=reason, message=message, causes=causes or []))


class ApplyItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    manifest: Any
    source: str = ""  # file name, for messages


class ApplyRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    items: list[ApplyItem]
    namespace: str = ""  # the namespace for objects that name none ("" = default)
    enforce_namespace: bool = False  # -n given: an object naming another namespace is refused
    dry_run: bool = False
    # PUT semantics (the Kubernetes API's update): each manifest is the whole new object, which
    # must exist; a resourceVersion it names must be the stored one (409 otherwise); finalizers and
    # ownerReferences are taken as sent (apply keeps the stored ones); removing the last finalizer
    # of an object being deleted removes it
    update: bool = False
    # the manifests' metadata.managedFields are the server's own bookkeeping (server-side apply in
    # the Kubernetes API front end computed them) and are stored as sent
    managed_fields: bool = False
    # who writes (metadata.managedFields): the manager gets the fields it changes, operation Update
    field_manager: str = ""


class ItemResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    outcome: str = ""  # created | configured | unchanged | deleted
    operation: str = ""  # on errors: "create" or "update", when the server got that far
    resource_version: str = ""
    error: Status | None = None


class GetRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    kind: str
    name: str
    namespace: str = ""
    min_resource_version: int = 0  # wait until the server has seen this stream sequence


class ListRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    kind: str
    namespace: str | None = None  # None = all namespaces
    label_selector: str = ""
    field_selector: str = ""
    limit: int = 0
    continue_: str = msgspec.field(default="", name="continue")
    min_resource_version: int = 0


class DeleteItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""  # precondition
    resource_version: str = ""  # precondition


class DeleteRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    items: list[DeleteItem]
    grace_period_seconds: int | None = None  # None = the object's default; 0 = now
    # Foreground | Background | Orphan (DeleteOptions.propagationPolicy); "" = the object's own
    # GC finalizers decide (upstream's nil), which is Background for an object without them
    propagation_policy: str = ""


class StatusRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    kind: str
    name: str
    status: Any
    namespace: str = ""
    resource_version: str = ""  # "" = unconditional (the server retries on its own conflicts)


class FinalizeRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    kind: str
    name: str
    namespace: str = ""
    add: list[str] = []
    remove: list[str] = []
    resource_version: str = ""


class EventRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Record a Kubernetes Event about an object (the server fills uid and apiVersion)."""

    kind: str
    name: str
    reason: str
    message: str
    namespace: str = ""
    type: str = "Normal"
    component: str = ""
    host: str = ""
    # core/v1 Event reportingInstance (which instance of ``component``); defaults to ``host``
    reporting_instance: str = ""


class AppendEventsRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Domain events a kubelet appends to one object, through the apiserver (NodeRestriction):
    each event as its tagged JSON, at the object's version the kubelet holds."""

    kind: str
    name: str
    events: list[Any]
    namespace: str = ""
    expected_last_seq: int | None = None
    msg_id: str = ""  # the same id on a retried request: the log keeps one copy


class Reply(msgspec.Struct, kw_only=True, omit_defaults=True):
    object: msgspec.Raw | None = None
    items: list[msgspec.Raw] | None = None
    results: list[ItemResult] | None = None
    resource_version: int = 0
    continue_: str = msgspec.field(default="", name="continue")
    error: Status | None = None


class ReplyIn(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A Reply as a client decodes it: objects as plain JSON values."""

    object: Any = None
    items: list[Any] | None = None
    results: list[ItemResult] | None = None
    resource_version: int = 0
    continue_: str = msgspec.field(default="", name="continue")
    error: Status | None = None


REQUEST_TYPES: dict[str, type[msgspec.Struct]] = {
    "apply": ApplyRequest,
    "create": ApplyRequest,
    "get": GetRequest,
    "list": ListRequest,
    "delete": DeleteRequest,
    "status": StatusRequest,
    "finalize": FinalizeRequest,
    "event": EventRequest,
    "append": AppendEventsRequest,
}


def qualified_resource(kind: str) -> str:
    """``resourceclaims.resource.k8s.io``, ``pods``: how Kubernetes names a resource in messages."""
    if kind == EVENT_KIND:
        return "events"
    rt = lookup_resource(kind)
    if rt is None:
        return kind.lower()
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def qualified_kind(kind: str) -> str:
    """``ResourceClaim.resource.k8s.io``, ``Pod``: how Kubernetes names a kind in Invalid errors."""
    rt = lookup_resource(kind)
    if rt is None:
        return kind
    shown = getattr(rt.struct, "WIRE_KIND", kind)  # the classic claim's token -> ResourceClaim
    return f"{shown}.{rt.group}" if rt.group else shown
