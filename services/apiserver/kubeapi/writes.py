"""Writes through the Kubernetes API, each one request to the apiserver's own handler.

POST is ``create``; PUT is the apiserver's ``update`` mode (the whole object, a stale
resourceVersion is a 409); PATCH applies JSON, merge or strategic merge patches
(``kubeapi.patch``) or server-side apply (``kubeapi.ssa``) to the current object
and writes the result as an update, again on a newer object when a controller wrote meanwhile;
DELETE and deletecollection send the apiserver's delete with the DeleteOptions; the ``status``
subresource is its status write and Deployments' ``scale`` an update of ``spec.replicas``.
Every write names a field manager, which the apiserver records in ``metadata.managedFields``.
"""

from __future__ import annotations

from typing import Any

import msgspec
import yaml
from aiohttp import web

from draflow.events.api.codec import decode_object, object_meta
from draflow.services.apiserver.admission.cel import cel_expressions, precheck
from draflow.services.apiserver.admission.served import default_object
from draflow.services.apiserver.kubeapi.encoding import list_json, object_json, status_json
from draflow.services.apiserver.kubeapi.http import (
    ApiError,
    Handlers,
    Target,
    dump,
    gk,
    json_response,
    user_agent_manager,
)
from draflow.services.apiserver.kubeapi.patch import PatchError, apply_patch
from draflow.services.apiserver.kubeapi.protobuf import ProtobufError, decode_body
from draflow.services.apiserver.kubeapi.scale import scale_of
from draflow.services.apiserver.kubeapi.ssa import ApplyConflict, check_config, server_side_apply
from draflow.services.runtime.protocol import (
    ApplyItem,
    ApplyRequest,
    DeleteItem,
    DeleteRequest,
    StatusError,
    StatusRequest,
)
from draflow.services.runtime.selectors import SelectorError, parse_field_selector, parse_label_selector

__all__ = ["BODY_TYPES", "Writes"]

PROTOBUF = "application/vnd.kubernetes.protobuf"
BODY_TYPES = frozenset({"application/json", "application/yaml", "application/apply-patch+yaml"})
MAX_ATTEMPTS = 5  # a patch is re-applied on a newer object this often before the 409 stands


class Writes(Handlers):
    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        ctype = request.content_type
        if ctype == PROTOBUF:
            try:
                return decode_body(raw)
            except ProtobufError as exc:
                message = f"the body of the request was in an unknown format: {exc}"
                raise ApiError(415, "UnsupportedMediaType", message) from None
        if ctype not in BODY_TYPES:
            accepted = ", ".join(sorted(BODY_TYPES))
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{accepted}",
            )
        try:
            if ctype in ("application/yaml", "application/apply-patch+yaml"):
                return yaml.safe_load(raw)
            return msgspec.json.decode(raw)
        except Exception as exc:
            raise ApiError(
                400, "BadRequest", f"the body of the request was in an unknown format: {exc}"
            ) from None

    def _check_body(self, body: Any, target: Target) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request must be an object")
        res = target.res
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if kind and kind != res.wire_kind:
            raise ApiError(400, "BadRequest", f"the kind {kind!r} does not match the resource {res.plural!r}")
        body.setdefault("kind", res.wire_kind)
        if not api_version:
            body["apiVersion"] = res.api_version(target.version)
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if target.namespace is not None and res.namespaced:
            ns = meta.get("namespace")
            if ns and ns != target.namespace:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = target.namespace
        if target.name and meta.get("name") and meta["name"] != target.name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        if target.name:
            meta["name"] = target.name
        return body

    def _apply_request(self, manifest: dict[str, Any], request: web.Request, **kw: Any) -> ApplyRequest:
        dry = request.query.get("dryRun") == "All"
        return ApplyRequest(items=[ApplyItem(manifest=manifest)], dry_run=dry, **kw)

    async def _write_object(self, verb: str, req: ApplyRequest, target: Target, status: int) -> web.Response:
        """One create or update through the apiserver's handler; the reply is the stored object."""
        if req.dry_run:  # decided exactly as the real write, nothing appended
            await precheck(cel_expressions([item.manifest for item in req.items]))  # off the loop
            await self._fresh()  # a replica decides on what the log holds now
            try:
                plan = self.api.applier.plan(req.items[0], req, verb == "create", {})
            except StatusError as exc:
                raise ApiError.of(exc.status, target.res, target.name) from None
            return json_response(object_json(target.res, plan.obj, target.version), status)
        reply = await self._call(verb, req)
        result = reply.results[0] if reply.results else None
        if result is None:
            raise ApiError(500, "InternalError", "Internal error occurred: no result")
        if result.error is not None:
            raise ApiError.of(result.error, target.res, result.name or target.name)
        if result.outcome == "unchanged":
            status = 200
        obj = self.store.index.get(target.res.kind, result.namespace, result.name)
        if obj is None:  # the update removed the last finalizer of an object being deleted
            details = {"name": result.name, **gk(target.res)}
            return json_response(status_json(200, "", "", details))
        return json_response(self.encodings.get(target.res, obj, target.version), status)

    def _manager(self, request: web.Request) -> str:
        return request.query.get("fieldManager") or user_agent_manager(request)

    async def _create(self, request: web.Request, target: Target) -> web.Response:
        body = self._check_body(await self._body(request), target)
        req = self._apply_request(
            body,
            request,
            namespace=target.namespace or "",
            enforce_namespace=True,
            field_manager=self._manager(request),
        )
        return await self._write_object("create", req, target, 201)

    def _update_request(
        self, request: web.Request, target: Target, new: dict[str, Any], current: dict[str, Any] | None
    ) -> ApplyRequest:
        """An update; managedFields the client changed itself are stored as sent (kubectl does
        that to hand client-side apply's fields to server-side apply)."""
        sent = (new.get("metadata") or {}).get("managedFields")
        live = ((current or {}).get("metadata") or {}).get("managedFields")
        own = bool(sent) and sent != live
        return self._apply_request(
            new,
            request,
            update=True,
            namespace=target.namespace or "",
            managed_fields=own,
            field_manager="" if own else self._manager(request),
        )

    async def _update(self, request: web.Request, target: Target) -> web.Response:
        body = self._check_body(await self._body(request), target)
        if target.sub == "status":
            return await self._write_status(request, target, body)
        current = self._as_dict(target, self._stored(target))
        return await self._write_object(
            "apply", self._update_request(request, target, body, current), target, 200
        )

    async def _write_status(self, request: web.Request, target: Target, body: dict[str, Any]) -> web.Response:
        rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
        req = StatusRequest(
            kind=target.res.kind,
            name=target.name,
            namespace=target.namespace or "",
            status=body.get("status") or {},
            resource_version=rv,
        )
        if request.query.get("dryRun") == "All":
            return self._get(target)
        await self._call("status", req, target)
        return self._get(target)

    def _patched(
        self, request: web.Request, target: Target, current: dict[str, Any] | None, raw: bytes
    ) -> dict[str, Any]:
        ctype = request.content_type
        res = target.res
        try:
            if ctype == "application/apply-patch+yaml":
                manager = request.query.get("fieldManager", "")
                if not manager:
                    raise ApiError(
                        422,
                        "Invalid",
                        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                        "is required for apply patch",
                    )
                try:
                    config = yaml.safe_load(raw)
                except yaml.YAMLError as exc:
                    raise ApiError(400, "BadRequest", f"error decoding YAML: {exc}") from None
                config = check_config(config, res.wire_kind)
                config = self._check_body(config, target)
                return server_side_apply(
                    current,
                    config,
                    manager,
                    force=request.query.get("force") in ("true", "1"),
                    struct=res.struct,
                    api_version=res.api_version(target.version),
                    defaulted=self._defaulted(config, target),
                )
            if res.custom and ctype == "application/strategic-merge-patch+json":
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                )
            return apply_patch(current, raw, ctype, res.struct)
        except PatchError as exc:
            raise ApiError(exc.code, exc.reason, exc.message) from None
        except ApplyConflict as exc:
            details = {"name": target.name, **gk(res), "causes": exc.causes}
            raise ApiError(409, "Conflict", str(exc), details) from None

    def _defaulted(self, config: dict[str, Any], target: Target) -> dict[str, Any] | None:
        """The configuration as defaulting would store it (for comparing values), if it decodes."""
        try:
            obj = default_object(decode_object(config), target.namespace or "default")
        except Exception:  # the write itself reports what is wrong with it
            return None
        data: dict[str, Any] = msgspec.json.decode(object_json(target.res, obj, target.version))
        return data

    async def _patch(self, request: web.Request, target: Target) -> web.Response:
        raw = await request.read()
        ssa = request.content_type == "application/apply-patch+yaml"
        last: ApiError | None = None
        for _ in range(MAX_ATTEMPTS):
            stored = self.store.index.get(target.res.kind, target.namespace or "", target.name)
            if stored is None and (not ssa or target.sub):
                self._stored(target)  # 404
            current = self._as_dict(target, stored) if stored is not None else None
            new = self._check_body(self._patched(request, target, current, raw), target)
            try:
                if target.sub == "status":
                    assert current is not None
                    new["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
                    return await self._write_status(request, target, new)
                if current is None:  # server-side apply creates
                    req = self._apply_request(
                        new, request, managed_fields=True, namespace=target.namespace or ""
                    )
                    return await self._write_object("create", req, target, 201)
                pinned = str((new.get("metadata") or {}).get("resourceVersion") or "")
                live = str(current["metadata"].get("resourceVersion") or "")
                if pinned and pinned != live and pinned not in _patch_rv(raw):
                    pinned = ""
                new["metadata"]["resourceVersion"] = pinned or live
                req = self._update_request(request, target, new, current)
                if ssa:
                    req = msgspec.structs.replace(req, managed_fields=True, field_manager="")
                return await self._write_object("apply", req, target, 200)
            except ApiError as exc:
                if exc.code != 409 or (exc.reason == "AlreadyExists" and not ssa):
                    raise
                if exc.reason == "Conflict" and _patch_rv(raw):
                    raise  # the patch named the version it was made for
                last = exc
                await self.store.sync(target.res.kind, target.namespace or "", target.name)
        assert last is not None
        raise last

    async def _scale(self, request: web.Request, target: Target) -> web.Response:
        """``…/deployments/<name>/scale``: GET, PUT, PATCH (draflow.services.apiserver.kubeapi.scale)."""
        if request.method == "GET":
            return dump(scale_of(self._as_dict(target, self._stored(target))))
        if request.method not in ("PUT", "PATCH"):
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        raw = await request.read()
        last: ApiError | None = None
        for _ in range(MAX_ATTEMPTS):
            current = self._as_dict(target, self._stored(target))
            scale = scale_of(current)
            try:
                if request.method == "PUT":
                    wanted = self._body_of(raw, request.content_type)
                else:
                    wanted = apply_patch(scale, raw, request.content_type, None)
            except PatchError as exc:
                raise ApiError(exc.code, exc.reason, exc.message) from None
            replicas = (wanted.get("spec") or {}).get("replicas") if isinstance(wanted, dict) else None
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise ApiError(
                    422,
                    "Invalid",
                    f'Scale.autoscaling "{target.name}" is invalid: spec.replicas: Invalid value: '
                    f"{replicas!r}: must be greater than or equal to 0",
                )
            pinned = str((wanted.get("metadata") or {}).get("resourceVersion") or "")
            new = dict(current, spec=dict(current.get("spec") or {}, replicas=replicas))
            new["metadata"] = dict(
                current["metadata"], resourceVersion=pinned or current["metadata"]["resourceVersion"]
            )
            req = self._update_request(request, target, new, current)
            try:
                await self._write_object("apply", req, target, 200)
            except ApiError as exc:
                if exc.code != 409 or pinned:
                    raise
                last = exc
                continue
            return dump(scale_of(self._as_dict(target, self._stored(target))))
        assert last is not None
        raise last

    def _body_of(self, raw: bytes, ctype: str) -> Any:
        if ctype not in BODY_TYPES:
            raise ApiError(
                415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {ctype}"
            )
        try:
            return yaml.safe_load(raw) if ctype.endswith("yaml") else msgspec.json.decode(raw)
        except Exception as exc:
            raise ApiError(
                400, "BadRequest", f"the body of the request was in an unknown format: {exc}"
            ) from None

    async def _delete(self, request: web.Request, target: Target) -> web.Response:
        opts = await self._delete_options(request)
        current = self._stored(target)
        pre = opts.get("preconditions") or {}
        item = DeleteItem(
            kind=target.res.kind,
            name=target.name,
            namespace=target.namespace or "",
            uid=str(pre.get("uid") or ""),
            resource_version=str(pre.get("resourceVersion") or ""),
        )
        if opts.get("dryRun") or request.query.get("dryRun") == "All":
            return json_response(self.encodings.get(target.res, current, target.version))
        reply = await self._call("delete", _delete_request([item], opts))
        result = reply.results[0] if reply.results else None
        if result is not None and result.error is not None:
            raise ApiError.of(result.error, target.res, target.name)
        left = self.store.index.get(target.res.kind, target.namespace or "", target.name)
        if left is not None:
            return json_response(self.encodings.get(target.res, left, target.version))
        meta = object_meta(current)
        return json_response(
            status_json(200, "", "", {"name": target.name, **gk(target.res), "uid": meta.uid})
        )

    async def _delete_collection(self, request: web.Request, target: Target) -> web.Response:
        opts = await self._delete_options(request)
        q = request.query
        try:
            labels = parse_label_selector(q.get("labelSelector", ""))
            field_reqs, fields = parse_field_selector(q.get("fieldSelector", ""))
        except SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        items = []
        objs = []
        for obj in self.store.index.items(target.res.kind, target.namespace):
            meta = object_meta(obj)
            if not labels(meta.labels):
                continue
            if field_reqs and not fields(self._as_dict(target, obj)):
                continue
            objs.append(obj)
            items.append(DeleteItem(kind=target.res.kind, name=meta.name, namespace=meta.namespace))
        if items and not (opts.get("dryRun") or q.get("dryRun") == "All"):
            await self._call("delete", _delete_request(items, opts))
        encoded = [self.encodings.get(target.res, o, target.version) for o in objs]
        return json_response(list_json(target.res, target.version, encoded, self.store.position))

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        opts: dict[str, Any] = {}
        if request.can_read_body:
            body = await request.read()
            if body.strip():
                try:
                    decoded = msgspec.json.decode(body)
                except msgspec.DecodeError as exc:
                    raise ApiError(400, "BadRequest", f"invalid DeleteOptions: {exc}") from None
                if isinstance(decoded, dict):
                    opts = decoded
        q = request.query
        if "gracePeriodSeconds" in q:
            opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
        if "propagationPolicy" in q:
            opts["propagationPolicy"] = q["propagationPolicy"]
        return opts


def _delete_request(items: list[DeleteItem], opts: dict[str, Any]) -> DeleteRequest:
    grace = opts.get("gracePeriodSeconds")
    policy = opts.get("propagationPolicy") or ""
    if not policy and opts.get("orphanDependents") is not None:
        policy = "Orphan" if opts["orphanDependents"] else "Background"
    return DeleteRequest(
        items=items, grace_period_seconds=int(grace) if grace is not None else None, propagation_policy=policy
    )


def _patch_rv(raw: bytes) -> str:
    """The resourceVersion a patch body names itself (then a conflict is the client's answer)."""
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return ""
    meta = body.get("metadata") if isinstance(body, dict) else None
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return str(rv) if rv else ""
