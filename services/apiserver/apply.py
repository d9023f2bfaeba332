"""``apply`` and ``create``: decode, default, validate and decide each manifest, then append.

Each manifest is decided against the in-memory store (plus the namespaces created earlier in the
same request), in order. Appends of one request are pipelined: up to ``WINDOW`` are in flight at
once, and a manifest addressing an object already in flight waits for it. An append refused with
a conflict (someone else changed the object meanwhile) is decided again after catching up. A
refused manifest appends nothing; the others go ahead, as with ``kubectl apply -f``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, NamedTuple

import nats.errors
from msgspec.structs import replace

from draflow.events.api.apiextensions_v1 import CustomObject, CustomResourceDefinition, custom_resource
from draflow.events.api.base import ApiStruct
from draflow.events.api.classic_pod import normalize_manifest
from draflow.events.api.codec import decode_object, object_meta
from draflow.events.api.errors import ApiError, FieldError
from draflow.events.api.registry import clash as registry_clash
from draflow.events.api.registry import lookup_resource
from draflow.events.envelope import Event
from draflow.events.objects import object_applied, object_deleted, status_updated
from draflow.infra.eventstore import AppendError, ConcurrencyError
from draflow.services.apiserver import errors
from draflow.services.apiserver.admission import check_admin_access
from draflow.services.apiserver.admission.served import admit_create, default_object, validate_object
from draflow.services.apiserver.admission.tolerations import DefaultTolerationSeconds
from draflow.services.apiserver.crd.definition import crd_status
from draflow.services.apiserver.crd.objects import admit_custom
from draflow.services.apiserver.managed_fields import record_update
from draflow.services.apiserver.quota import QuotaAdmission
from draflow.services.apiserver.strategy import (
    generated_name,
    merge_update,
    now_rfc3339,
    prepare_create,
    stamp_create,
    stamp_taint_times,
)
from draflow.services.runtime.protocol import ApplyItem, ApplyRequest, ItemResult, StatusError
from draflow.services.runtime.store import ApiStore

__all__ = ["Applier"]

WINDOW = 512  # manifests decided before their appends are sent together
MAX_ATTEMPTS = 5
MAX_DEPTH = 100
_QUOTA_INPUTS = frozenset({"ResourceQuota", "DeviceClass"})  # change what later quota checks see
_CRD = "CustomResourceDefinition"  # serves a kind the manifests after it may use

log = logging.getLogger(__name__)


class Plan(NamedTuple):
    kind: str
    namespace: str
    name: str
    outcome: str  # created | configured | unchanged
    events: list[Event]
    expected: int
    obj: ApiStruct
    charged: bool = False  # quota-charged: later decisions of the same request must see it


def _identity(manifest: Any) -> tuple[str, str, str, str]:
    if not isinstance(manifest, dict):
        return "", "", "", ""
    meta = manifest.get("metadata")
    meta = meta if isinstance(meta, dict) else {}

    def text(v: Any) -> str:
        return v if isinstance(v, str) else ""

    return (
        text(manifest.get("apiVersion")),
        text(manifest.get("kind")),
        text(meta.get("namespace")),
        text(meta.get("name")) or text(meta.get("generateName")),
    )


def _too_deep(value: dict[str, Any] | list[Any], depth: int) -> bool:
    if depth > MAX_DEPTH:
        return True
    for child in value.values() if isinstance(value, dict) else value:
        if (type(child) is dict or type(child) is list) and _too_deep(child, depth + 1):
            return True
    return False


def _check_shape(value: Any) -> None:
    """Bound nesting before decoding (free-form fields such as opaque parameters take anything,
    and what is stored must stay printable by every reader)."""
    if isinstance(value, dict | list) and _too_deep(value, 0):
        raise errors.bad_request(f"object nested deeper than {MAX_DEPTH} levels")


def append_error(kind: str, name: str, exc: AppendError | nats.errors.MaxPayloadError) -> StatusError:
    """JetStream (or the connection) refused the append itself: almost always the size limit."""
    if isinstance(exc, nats.errors.MaxPayloadError) or "maximum payload" in str(exc).lower():
        return StatusError.of(413, "RequestEntityTooLarge", f"Request entity too large: {kind} {name!r}")
    return errors.internal(f"storing {kind} {name!r} failed: {exc}")


class Applier:
    def __init__(
        self,
        store: ApiStore,
        quota: QuotaAdmission | None = None,
        tolerations: DefaultTolerationSeconds | None = None,
    ) -> None:
        self.store = store
        self.quota = quota or QuotaAdmission()
        self.tolerations = tolerations or DefaultTolerationSeconds()  # mutating admission on Pods

    # -- deciding ------------------------------------------------------------------------------

    def _namespace_ok(self, kind: str, name: str, namespace: str, overlay: dict[str, ApiStruct]) -> ApiStruct:
        ns = overlay.get(namespace) or self.store.index.get("Namespace", "", namespace)
        if ns is None:
            raise errors.namespace_not_found(namespace)
        if object_meta(ns).deletion_timestamp is not None:
            raise errors.forbidden(
                kind,
                name,
                f"unable to create new content in namespace {namespace} because it is being terminated",
            )
        return ns

    def plan(
        self, item: ApplyItem, req: ApplyRequest, create_only: bool, overlay: dict[str, ApiStruct]
    ) -> Plan:
        """Decide one manifest; raises StatusError when it is refused (never anything else)."""
        try:
            _check_shape(item.manifest)
            return self._plan(item, req, create_only, overlay)
        except StatusError:
            raise
        except RecursionError:
            raise errors.bad_request(f"object nested deeper than {MAX_DEPTH} levels") from None
        except Exception as exc:  # a bug in decoding/admission: say so, keep serving the others
            _, kind, _, name = _identity(item.manifest)
            log.exception("deciding %s %r failed", kind, name)
            raise errors.internal(f"deciding {kind} {name!r} failed: {type(exc).__name__}: {exc}") from None

    def _plan(
        self, item: ApplyItem, req: ApplyRequest, create_only: bool, overlay: dict[str, ApiStruct]
    ) -> Plan:
        api_version, kind, ns_hint, name_hint = _identity(item.manifest)
        try:
            manifest = normalize_manifest(item.manifest)  # kind-less classic documents, KEP Pods
            api_version, kind, ns_hint, name_hint = _identity(manifest)
            obj = decode_object(manifest)
        except ApiError as exc:
            scope = lookup_resource(kind) if kind else None
            ns = (ns_hint or req.namespace or "default") if scope is not None and scope.namespaced else ""
            raise errors.from_api_error(exc, api_version, kind, name_hint, ns) from None
        except (ValueError, TypeError, RecursionError) as exc:
            raise errors.bad_request(f"cannot decode {kind or 'object'} {name_hint!r}: {exc}") from None
        rt = lookup_resource(obj.KIND)
        assert rt is not None  # decode_object only returns served kinds
        namespace_hint = (ns_hint or req.namespace or "default") if rt.namespaced else ""
        kind, meta = obj.KIND, object_meta(obj)
        namespace = ""
        if rt.namespaced:
            namespace = meta.namespace or req.namespace or "default"
            if req.enforce_namespace and meta.namespace and req.namespace and meta.namespace != req.namespace:
                raise errors.bad_request(
                    f'the namespace from the provided object "{meta.namespace}" does not match the '
                    f'namespace "{req.namespace}". You must pass '
                    f"'--namespace={meta.namespace}' to perform this operation."
                )
        name = meta.name
        if not name and meta.generate_name:
            if not create_only:
                raise errors.bad_request(f"from {meta.generate_name}: cannot use generate name with apply")
            name = generated_name(meta.generate_name)
            obj = _with_name(obj, name)
        existing = self.store.index.get(kind, namespace, name) if name else None
        if existing is not None and create_only:
            raise errors.already_exists(kind, name)
        if isinstance(obj, CustomObject):
            obj = self._admit_custom(obj, rt.crd, existing, api_version, namespace_hint)
        elif isinstance(obj, CustomResourceDefinition):
            self._check_crd_names(obj)
        if req.update:
            if existing is None:
                raise errors.not_found(kind, name)
            if meta.resource_version and meta.resource_version != object_meta(existing).resource_version:
                stale = errors.conflict(kind, name)
                stale.operation = "update"
                raise stale
        try:
            if existing is None:
                return self._plan_create(obj, kind, namespace, name, overlay, req)
            return self._plan_update(obj, existing, kind, namespace, name, req)
        except StatusError as exc:
            exc.operation = "create" if existing is None else "update"
            raise

    def _admit_custom(
        self, obj: CustomObject, crd_name: str, existing: ApiStruct | None, api_version: str, namespace: str
    ) -> CustomObject:
        """The CRD's schema on a custom object (``crd.objects``), refusals as the API server's."""
        crd = self.store.index.get(CustomResourceDefinition.KIND, "", crd_name)
        name = obj.metadata.name or obj.metadata.generate_name
        if not isinstance(crd, CustomResourceDefinition):
            raise StatusError.of(
                404, "NoKindMatch", f'no matches for kind "{obj.kind}" in version "{api_version}"'
            )
        old = existing if isinstance(existing, CustomObject) else None
        try:
            return admit_custom(obj, crd, old)
        except ApiError as exc:
            error = errors.from_api_error(exc, api_version, obj.kind, name, namespace)
            error.operation = "create" if existing is None else "update"
            raise error from None

    def _check_crd_names(self, crd: CustomResourceDefinition) -> None:
        """A CRD may not take a kind or name another resource is served by (draflow keys its
        store by kind, so two groups cannot share one)."""
        rt, _ = custom_resource(crd)
        if not rt.kind or not rt.plural:
            return  # validation names what is missing
        problem = registry_clash(rt)
        if problem:
            raise errors.invalid(
                crd.KIND,
                crd.metadata.name,
                [
                    FieldError(
                        kind=crd.KIND, path="spec.names.kind", rule=f'Invalid value: "{rt.kind}": {problem}'
                    )
                ],
            )

    def _plan_create(
        self,
        obj: ApiStruct,
        kind: str,
        namespace: str,
        name: str,
        overlay: dict[str, ApiStruct],
        req: ApplyRequest,
    ) -> Plan:
        managed = object_meta(obj).managed_fields if req.managed_fields else ()
        try:
            obj = admit_create(self.tolerations.admit(prepare_create(obj)), namespace or "default")
        except ApiError as exc:
            raise errors.invalid(
                kind, name or object_meta(obj).generate_name, exc.errors, namespace
            ) from None
        if namespace:
            ns = self._namespace_ok(kind, name, namespace, overlay)
            problems = check_admin_access(obj, object_meta(ns).labels)
            if problems:
                raise errors.invalid(kind, name, problems, namespace)
        self.quota.check(obj)
        now = now_rfc3339()
        obj = stamp_taint_times(stamp_create(obj, uid=str(uuid.uuid4()), now=now), None, now)
        if isinstance(obj, CustomResourceDefinition):
            obj = replace(obj, status=crd_status(obj, None, now))
        if managed:
            obj = replace(obj, metadata=replace(object_meta(obj), managed_fields=managed))
        elif req.field_manager:
            obj = record_update(None, obj, req.field_manager)
        expected = self.store.index.version(kind, namespace, name)
        charged = self.quota.charged(obj)
        return Plan(kind, namespace, name, "created", [object_applied(obj)], expected, obj, charged)

    def _plan_update(
        self, obj: ApiStruct, existing: ApiStruct, kind: str, namespace: str, name: str, req: ApplyRequest
    ) -> Plan:
        admitted = self.tolerations.admit(obj)
        defaulted = default_object(admitted, namespace or "default")
        defaulted = stamp_taint_times(defaulted, existing, now_rfc3339())
        merged = merge_update(
            existing, defaulted, raw=admitted, replace_meta=req.update, managed_fields=req.managed_fields
        )
        problems = validate_object(merged, existing)
        if problems:
            raise errors.invalid(kind, name, problems, namespace)
        expected = int(object_meta(existing).resource_version or 0)
        if merged == existing or (req.managed_fields and _same_but_managed_fields(merged, existing)):
            return Plan(kind, namespace, name, "unchanged", [], expected, existing)
        if req.field_manager and not req.managed_fields:
            merged = record_update(existing, merged, req.field_manager)
        self.quota.check(merged, existing)
        charged = self.quota.charged(merged)
        events = [object_applied(merged)]
        if isinstance(merged, CustomResourceDefinition) and isinstance(existing, CustomResourceDefinition):
            status = crd_status(merged, existing, now_rfc3339())
            if status != existing.status:
                events.append(status_updated(kind, status))
        meta = object_meta(merged)
        deleting = meta.deletion_timestamp is not None and not meta.deletion_grace_period_seconds
        if deleting and not meta.finalizers:
            events.append(object_deleted(kind))  # the last finalizer went: the object goes
        return Plan(kind, namespace, name, "configured", events, expected, merged, charged)

    # -- appending -----------------------------------------------------------------------------

    async def apply(self, req: ApplyRequest, create_only: bool) -> list[ItemResult]:
        results: list[ItemResult | None] = [None] * len(req.items)
        overlay: dict[str, ApiStruct] = {}  # namespaces created by this request, not yet stored
        pending: dict[tuple[str, str, str], tuple[int, Plan]] = {}  # decided, not yet appended
        retry: list[int] = []

        async def flush() -> None:
            batch = list(pending.values())
            pending.clear()
            outcomes = await self.store.append_many(
                [(p.kind, p.namespace, p.name, p.events, p.expected) for _, p in batch]
            )
            for (i, plan), outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, ConcurrencyError):
                    retry.append(i)
                else:
                    results[i] = _finish(plan, outcome)

        for i, item in enumerate(req.items):
            plan = self._decide(item, req, create_only, overlay, results, i)
            if plan is not None and (plan.kind, plan.namespace, plan.name) in pending:
                await flush()  # the same object twice: decide again on the stored first one
                plan = self._decide(item, req, create_only, overlay, results, i)
            if plan is None or not plan.events or req.dry_run:
                continue
            pending[(plan.kind, plan.namespace, plan.name)] = (i, plan)
            if plan.kind == "Namespace":
                overlay[plan.name] = plan.obj
            if plan.charged or plan.kind in _QUOTA_INPUTS or plan.kind == _CRD or len(pending) >= WINDOW:
                await flush()
        await flush()
        for i in retry:
            results[i] = await self._apply_one(req.items[i], req, create_only)
        return [
            r if r is not None else ItemResult(error=errors.internal("no result").status) for r in results
        ]

    def _decide(
        self,
        item: ApplyItem,
        req: ApplyRequest,
        create_only: bool,
        overlay: dict[str, ApiStruct],
        results: list[ItemResult | None],
        i: int,
    ) -> Plan | None:
        """Plan one item, recording its result now when it is refused or needs no append."""
        try:
            plan = self.plan(item, req, create_only, overlay)
        except StatusError as exc:
            results[i] = _refused(item, exc)
            return None
        results[i] = _result(plan, plan.expected)  # replaced by the append's outcome, if any
        return plan

    async def _apply_one(self, item: ApplyItem, req: ApplyRequest, create_only: bool) -> ItemResult:
        """Decide and append one manifest, catching up and deciding again on conflicts; after
        ``MAX_ATTEMPTS`` (kubectl's patch retries) the conflict is the answer."""
        operation = ""
        for _ in range(MAX_ATTEMPTS):
            try:
                plan = self.plan(item, req, create_only, {})
            except StatusError as exc:
                return _refused(item, exc)
            if not plan.events:
                return _result(plan, plan.expected)
            operation = "create" if plan.outcome == "created" else "update"
            try:
                seq = await self.store.append(
                    plan.kind, plan.namespace, plan.name, plan.events, expected_last_seq=plan.expected
                )
            except ConcurrencyError:
                await self.store.sync(plan.kind, plan.namespace, plan.name)
                continue
            except Exception as exc:
                return _finish(plan, exc)
            return _result(plan, seq)
        _, kind, namespace, name = _identity(item.manifest)
        error = errors.conflict(kind, name).status
        return ItemResult(kind=kind, namespace=namespace, name=name, operation=operation, error=error)


def _same_but_managed_fields(a: ApiStruct, b: ApiStruct) -> bool:
    """Nothing changes but the managers' timestamps (an apply that asks for nothing new)."""

    def untimed(obj: ApiStruct) -> ApiStruct:
        meta = object_meta(obj)
        entries = tuple(replace(e, time=None) for e in meta.managed_fields)
        return replace(obj, metadata=replace(meta, managed_fields=entries))

    return untimed(a) == untimed(b)


def _with_name(obj: ApiStruct, name: str) -> ApiStruct:
    return replace(obj, metadata=replace(object_meta(obj), name=name))


def _result(plan: Plan, seq: int) -> ItemResult:
    return ItemResult(
        kind=plan.kind,
        namespace=plan.namespace,
        name=plan.name,
        outcome=plan.outcome,
        resource_version=str(seq),
    )


def _finish(plan: Plan, outcome: int | BaseException) -> ItemResult:
    if isinstance(outcome, int):
        return _result(plan, outcome)
    if isinstance(outcome, AppendError | nats.errors.MaxPayloadError):
        err = append_error(plan.kind, plan.name, outcome)
    elif isinstance(outcome, StatusError):
        err = outcome
    else:
        err = errors.internal(
            f"storing {plan.kind} {plan.name!r} failed: {type(outcome).__name__}: {outcome}"
        )
    return ItemResult(kind=plan.kind, namespace=plan.namespace, name=plan.name, error=err.status)


def _refused(item: ApplyItem, exc: StatusError) -> ItemResult:
    _, kind, namespace, name = _identity(item.manifest)
    return ItemResult(kind=kind, namespace=namespace, name=name, operation=exc.operation, error=exc.status)
