"""The Kubernetes REST API over HTTPS, served from inside the apiserver process.

Reads (GET, LIST, WATCH) come straight from the apiserver's in-memory store (the objects folded
from the log) and its watch cache; every write is one request to the apiserver's own handler
(``ApiServer.handle``: the same decode, default, validate, quota and append as a request on the
NATS API), so the two APIs cannot disagree. Errors are ``metav1.Status`` objects with the HTTP code
the apiserver's Status carries.

Routes: discovery (``services.kubeapi.discovery``), OpenAPI (``services.kubeapi.openapi``), and
for every resource ``/api/v1/...`` or ``/apis/<group>/<version>/...``: collection
(``[namespaces/<ns>/]<plural>``: GET list/watch, POST create, DELETE deletecollection), item
(``.../<plural>/<name>``: GET, PUT, PATCH, DELETE) and ``.../<name>/status`` (GET, PUT, PATCH).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import Any

import msgspec
import yaml
from aiohttp import web

from events.api.base import ApiStruct
from events.api.codec import decode_object, object_meta
from services.apiserver.admission.served import default_object
from services.apiserver.protocol import (
    ApplyItem,
    ApplyRequest,
    DeleteItem,
    DeleteRequest,
    ReplyIn,
    Status,
    StatusError,
    StatusRequest,
)
from services.apiserver.selectors import SelectorError, parse_field_selector, parse_label_selector
from services.apiserver.server import ApiServer
from services.kubeapi import discovery, openapi
from services.kubeapi.auth import Credentials
from services.kubeapi.encoding import EncodingCache, list_json, object_json, status_json
from services.kubeapi.patch import PatchError, apply_patch
from services.kubeapi.resources import Resource, by_path
from services.kubeapi.scale import SCALABLE, scale_of
from services.kubeapi.ssa import ApplyConflict, check_config, server_side_apply
from services.kubeapi.tables import table_json
from services.kubeapi.watch import WatchCache, serve_watch

__all__ = ["ApiError", "KubeApi"]

log = logging.getLogger(__name__)

_JSON = "application/json"
_BODY_TYPES = frozenset({"application/json", "application/yaml", "application/apply-patch+yaml"})
_PUBLIC = frozenset({"/version", "/healthz", "/livez", "/readyz", "/version/"})
MAX_ATTEMPTS = 5  # a patch is re-applied on a newer object this often before the 409 stands


class ApiError(Exception):
    """A refusal on its way to the client as a Status."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    @classmethod
    def of(cls, status: Status, res: Resource | None = None, name: str = "") -> ApiError:
        details: dict[str, Any] = {}
        if name:
            details["name"] = name
        if res is not None:
            if res.group:
                details["group"] = res.group
            # upstream names the kind in Invalid's details, the resource everywhere else
            details["kind"] = res.wire_kind if status.reason == "Invalid" else res.plural
        if status.causes:
            details["causes"] = [
                {k: v for k, v in (("reason", c.reason), ("message", c.message), ("field", c.field)) if v}
                for c in status.causes
            ]
        return cls(status.code, status.reason, status.message, details or None)

    def response(self) -> web.Response:
        return web.Response(
            body=status_json(self.code, self.reason, self.message, self.details),
            status=self.code,
            content_type=_JSON,
        )


def _json(data: bytes, status: int = 200) -> web.Response:
    return web.Response(body=data, status=status, content_type=_JSON)


def _dump(value: Any, status: int = 200) -> web.Response:
    return _json(msgspec.json.encode(value), status)


@dataclass(frozen=True)
class Target:
    res: Resource
    version: str
    namespace: str | None  # None: all namespaces (or cluster-scoped)
    name: str = ""
    sub: str = ""


def _wants_table(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    for part in accept.split(","):
        params = {p.split("=", 1)[0].strip(): p.split("=", 1)[-1].strip() for p in part.split(";")[1:]}
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return True
        if part.strip().startswith(_JSON) and "as=" not in part:
            return False
    return False


class KubeApi:
    def __init__(
        self,
        api: ApiServer,
        *,
        host: str = "127.0.0.1",
        port: int = 8443,
        credentials: Credentials | None = None,
        watch_capacity: int = 100_000,
    ) -> None:
        self.api = api
        self.store = api.store
        self.host, self.port = host, port
        self.credentials = credentials
        self.encodings = EncodingCache()
        self.watches = WatchCache(api.store, self.encodings, capacity=watch_capacity)
        self._runner: web.AppRunner | None = None
        self.app = web.Application(middlewares=[self._middleware], client_max_size=16 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self._route)

    @property
    def url(self) -> str:
        scheme = "https" if self.credentials is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    async def start(self) -> None:
        self.watches.start()
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        ctx: ssl.SSLContext | None = self.credentials.ssl_context() if self.credentials else None
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=ctx, reuse_address=True)
        try:
            await site.start()
        except OSError:
            await self.stop()
            raise
        if self.port == 0:
            server: Any = site._server  # the ephemeral port the OS chose (tests)
            self.port = server.sockets[0].getsockname()[1]
        log.info("Kubernetes API on %s", self.url)

    async def stop(self) -> None:
        await self.watches.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- plumbing ----------------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.credentials is not None and request.path not in _PUBLIC:
            if self.credentials.authenticate(request.headers.get("Authorization", "")) is None:
                return ApiError(401, "Unauthorized", "Unauthorized").response()
        try:
            return await handler(request)
        except ApiError as exc:
            return exc.response()
        except web.HTTPException:
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.exception("%s %s failed", request.method, request.path)
            return ApiError(
                500, "InternalError", f"Internal error occurred: {type(exc).__name__}: {exc}"
            ).response()

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        parts = [p for p in path.split("/") if p]
        method = request.method
        if method == "GET":
            doc = self._static(path, parts, request)
            if doc is not None:
                return doc
        target = self._target(parts)
        if target is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if target.sub == "scale" and target.res.kind in SCALABLE and target.name:
            return await self._scale(request, target)
        if target.sub and target.sub != "status":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not target.name:
            if method == "GET":
                return await self._list_or_watch(request, target)
            if method == "POST":
                return await self._create(request, target)
            if method == "DELETE":
                return await self._delete_collection(request, target)
        else:
            if method == "GET":
                return self._get(target)
            if method == "PUT":
                return await self._update(request, target)
            if method == "PATCH":
                return await self._patch(request, target)
            if method == "DELETE" and not target.sub:
                return await self._delete(request, target)
        raise ApiError(
            405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
        )

    def _static(self, path: str, parts: list[str], request: web.Request) -> web.StreamResponse | None:
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if path == "/version":
            return _dump(discovery.version_info())
        if path == "/api":
            return _dump(discovery.api_versions(f"{request.host}"))
        if path == "/apis":
            return _dump(discovery.api_group_list())
        if path == "/api/v1":
            return _dump(discovery.api_resource_list("", "v1"))
        if parts[:1] == ["openapi"]:
            doc = openapi.document(parts[1:], request.query)
            if doc is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return _json(doc)
        if parts[:1] == ["apis"] and len(parts) == 2:
            group = discovery.api_group(parts[1])
            if group is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return _dump(group)
        if parts[:1] == ["apis"] and len(parts) == 3:
            resources = discovery.api_resource_list(parts[1], parts[2])
            if resources is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return _dump(resources)
        return None

    def _target(self, parts: list[str]) -> Target | None:
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            inner = by_path(group, version, rest[2])
            if inner is not None and inner.namespaced:
                namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        res = by_path(group, version, rest[0])
        if res is None:
            return None
        if res.namespaced and namespace is None and len(rest) > 1:
            return None  # a namespaced object needs its namespace in the path
        return Target(
            res, version, namespace, rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
        )

    def _stored(self, target: Target) -> ApiStruct:
        obj = self.store.index.get(target.res.kind, target.namespace or "", target.name)
        if obj is None:
            raise ApiError(
                404,
                "NotFound",
                f'{_qualified(target.res)} "{target.name}" not found',
                {"name": target.name, **_gk(target.res)},
            )
        return obj

    async def _call(self, verb: str, req: msgspec.Struct) -> ReplyIn:
        reply = await self.api.handle(verb, msgspec.json.encode(req))
        out = msgspec.json.decode(msgspec.json.encode(reply), type=ReplyIn)
        if out.error is not None:
            raise ApiError.of(out.error)
        return out

    # -- reads ---------------------------------------------------------------------------------------

    def _get(self, target: Target) -> web.Response:
        return _json(self.encodings.get(target.res, self._stored(target), target.version))

    async def _list_or_watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        q = request.query
        try:
            labels = parse_label_selector(q.get("labelSelector", ""))
            field_reqs, fields = parse_field_selector(q.get("fieldSelector", ""))
        except SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        res = target.res

        def selected(obj: ApiStruct, data: bytes | None = None) -> bool:
            meta = object_meta(obj)
            if not labels(meta.labels):
                return False
            if not field_reqs:
                return True
            if all(path in ("metadata.name", "metadata.namespace") for path, _, _ in field_reqs):
                return fields({"metadata": {"name": meta.name, "namespace": meta.namespace}})
            encoded = data if data is not None else self.encodings.get(res, obj, target.version)
            as_dict: dict[str, Any] = msgspec.json.decode(encoded)
            return fields(as_dict)

        if q.get("watch") in ("1", "true", "True"):
            return await serve_watch(
                request, self.watches, target.res, target.version, target.namespace, selected
            )
        rv = q.get("resourceVersion", "")
        if rv and rv.isdigit() and int(rv) > self.store.position:
            try:
                await self.store.wait_position(int(rv), 3.0)
            except TimeoutError:
                raise ApiError(
                    504, "Timeout", f"Too large resource version: {rv}, current: {self.store.position}"
                ) from None
        limit = int(q.get("limit", "0") or 0)
        after = tuple(q["continue"].split("/", 1)) if q.get("continue") else None
        await self.watches.consistent()  # from here on synchronous: one snapshot
        position = self.store.position
        objs: list[ApiStruct] = []
        encoded: list[bytes] = []
        cont = ""
        for obj in self.store.index.items(res.kind, target.namespace):
            if after is not None:
                meta = object_meta(obj)
                if (meta.namespace, meta.name) <= after:
                    continue
            data = self.encodings.get(res, obj, target.version)
            if not selected(obj, data):
                continue
            if limit and len(objs) >= limit:
                last = object_meta(objs[-1])
                cont = f"{last.namespace}/{last.name}"
                break
            objs.append(obj)
            encoded.append(data)
        if _wants_table(request):
            return _json(table_json(res, objs, encoded, position, q.get("includeObject", "Metadata"), cont))
        return _json(list_json(res, target.version, encoded, position, cont))

    # -- writes --------------------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        ctype = request.content_type
        if ctype not in _BODY_TYPES:
            accepted = ", ".join(sorted(_BODY_TYPES))
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
            try:
                plan = self.api.applier.plan(req.items[0], req, verb == "create", {})
            except StatusError as exc:
                raise ApiError.of(exc.status, target.res, target.name) from None
            return _json(object_json(target.res, plan.obj, target.version), status)
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
            details = {"name": result.name, **_gk(target.res)}
            return _json(status_json(200, "", "", details))
        return _json(self.encodings.get(target.res, obj, target.version), status)

    def _manager(self, request: web.Request) -> str:
        return request.query.get("fieldManager") or _user_agent_manager(request)

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

    def _as_dict(self, target: Target, obj: ApiStruct) -> dict[str, Any]:
        data: dict[str, Any] = msgspec.json.decode(self.encodings.get(target.res, obj, target.version))
        return data

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
        await self._call("status", req)
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
            return apply_patch(current, raw, ctype, res.struct)
        except PatchError as exc:
            raise ApiError(exc.code, exc.reason, exc.message) from None
        except ApplyConflict as exc:
            details = {"name": target.name, **_gk(res), "causes": exc.causes}
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
        """``…/deployments/<name>/scale``: GET, PUT, PATCH (services.kubeapi.scale)."""
        if request.method == "GET":
            return _dump(scale_of(self._as_dict(target, self._stored(target))))
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
            return _dump(scale_of(self._as_dict(target, self._stored(target))))
        assert last is not None
        raise last

    def _body_of(self, raw: bytes, ctype: str) -> Any:
        if ctype not in _BODY_TYPES:
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
            return _json(self.encodings.get(target.res, current, target.version))
        reply = await self._call("delete", _delete_request([item], opts))
        result = reply.results[0] if reply.results else None
        if result is not None and result.error is not None:
            raise ApiError.of(result.error, target.res, target.name)
        left = self.store.index.get(target.res.kind, target.namespace or "", target.name)
        if left is not None:
            return _json(self.encodings.get(target.res, left, target.version))
        meta = object_meta(current)
        return _json(status_json(200, "", "", {"name": target.name, **_gk(target.res), "uid": meta.uid}))

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
        return _json(list_json(target.res, target.version, encoded, self.store.position))

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


def _qualified(res: Resource) -> str:
    return f"{res.plural}.{res.group}" if res.group else res.plural


def _gk(res: Resource) -> dict[str, str]:
    return {"group": res.group, "kind": res.plural} if res.group else {"kind": res.plural}


def _user_agent_manager(request: web.Request) -> str:
    """Upstream's default field manager: the user agent's program name (``kubectl``)."""
    agent = request.headers.get("User-Agent", "")
    return agent.split("/", 1)[0][:128] if agent else "unknown"


def _patch_rv(raw: bytes) -> str:
    """The resourceVersion a patch body names itself (then a conflict is the client's answer)."""
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return ""
    meta = body.get("metadata") if isinstance(body, dict) else None
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return str(rv) if rv else ""
