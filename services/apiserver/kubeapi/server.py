"""The Kubernetes REST API over HTTPS, served from inside the apiserver process.

Reads (GET, LIST, WATCH) come straight from the apiserver's in-memory store (the objects folded
from the log) and its watch cache; every write is one request to the apiserver's own handler
(``ApiServer.handle``: the same decode, default, validate, quota and append as a request on the
NATS API), so the two APIs cannot disagree. A replica (``--kube-api-only``) sends that request to
the control plane's apiserver instead (``ApiClient.forward``, for the authenticated user), so quota
and every other admission decision are still made in one place. Errors are ``metav1.Status``
objects with the HTTP code the apiserver's Status carries.

Writes are in ``kubeapi.writes``; the shared plumbing in ``kubeapi.http``.

Routes: discovery (``kubeapi.discovery``), OpenAPI (``kubeapi.openapi``), and
for every resource ``/api/v1/...`` or ``/apis/<group>/<version>/...``: collection
(``[namespaces/<ns>/]<plural>``: GET list/watch, POST create, DELETE deletecollection), item
(``.../<plural>/<name>``: GET, PUT, PATCH, DELETE), ``.../<name>/status`` (GET, PUT, PATCH) and
``.../deployments/<name>/scale``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

import msgspec
from aiohttp import web

from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import object_meta
from draflow.infra.eventstore import acting_for
from draflow.services.apiserver.kubeapi import discovery, identity, openapi
from draflow.services.apiserver.kubeapi.auth import Credentials
from draflow.services.apiserver.kubeapi.authz import (
    Attributes,
    ImpersonationError,
    allowed,
    forbidden_message,
    impersonate,
    verb_of,
)
from draflow.services.apiserver.kubeapi.encoding import EncodingCache, list_json
from draflow.services.apiserver.kubeapi.http import JSON, ApiError, Target, dump, json_response
from draflow.services.apiserver.kubeapi.resources import by_path
from draflow.services.apiserver.kubeapi.scale import SCALABLE
from draflow.services.apiserver.kubeapi.tables import table_json
from draflow.services.apiserver.kubeapi.tokens import User
from draflow.services.apiserver.kubeapi.watch import WatchCache, serve_watch
from draflow.services.apiserver.kubeapi.writes import Writes
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.selectors import SelectorError, parse_field_selector, parse_label_selector

__all__ = ["KubeApi"]

log = logging.getLogger(__name__)

_PUBLIC = frozenset({"/version", "/healthz", "/livez", "/readyz", "/version/"})
USER = web.RequestKey("user", User)  # the authenticated user of a request (absent without TLS/tokens)


def _wants_table(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    for part in accept.split(","):
        params = {p.split("=", 1)[0].strip(): p.split("=", 1)[-1].strip() for p in part.split(";")[1:]}
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return True
        if part.strip().startswith(JSON) and "as=" not in part:
            return False
    return False


class KubeApi(Writes):
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
        if not api.requests:  # a replica: writes go to the control plane's apiserver
            events = api.events
            self.control_plane = ApiClient(
                events.nc, events.settings, actor=events.actor, wait_for_server_s=10.0
            )
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
        user: User | None = None
        if self.credentials is not None and request.path not in _PUBLIC:
            user = self.credentials.authenticate(request.headers.get("Authorization", ""))
            if user is None:
                return ApiError(401, "Unauthorized", "Unauthorized").response()
        actor = f"user:{user.name}" if user is not None else None
        if user is not None and (
            "Impersonate-User" in request.headers or "Impersonate-Group" in request.headers
        ):
            try:
                as_user = impersonate(
                    user,
                    request.headers.get("Impersonate-User", ""),
                    request.headers.getall("Impersonate-Group", []),
                    request.headers.get("Impersonate-Uid", ""),
                )
            except ImpersonationError as exc:
                return ApiError(exc.code, exc.reason, str(exc), exc.details).response()
            actor, user = f"user:{user.name} as {as_user.name}", as_user
        if user is not None:
            request[USER] = user
        token = acting_for.set(actor)
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
        finally:
            acting_for.reset(token)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        parts = [p for p in path.split("/") if p]
        method = request.method
        if method == "GET":
            doc = self._static(path, parts, request)
            if doc is not None:
                return doc
        user = request.get(USER)
        review = identity.review_kind(parts)
        if review is not None and method == "POST":
            return await identity.answer(request, review, user)
        target = self._target(parts)
        if target is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if user is not None:
            self._authorize(request, user, target)
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
                await self._fresh()
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

    @staticmethod
    def _authorize(request: web.Request, user: User, target: Target) -> None:
        """403 Forbidden unless the user's groups allow the request (``kubeapi.authz``)."""
        watch = request.query.get("watch") in ("1", "true", "True")
        attrs = Attributes(
            verb=verb_of(request.method, bool(target.name), watch and not target.name),
            group=target.res.group,
            resource=target.res.plural,
            namespaced=target.res.namespaced,
            namespace=target.namespace or "",
            name=target.name,
            subresource=target.sub,
        )
        if not allowed(user, attrs):
            details: dict[str, Any] = {"kind": target.res.plural}
            if target.name:
                details["name"] = target.name
            if target.res.group:
                details["group"] = target.res.group
            raise ApiError(403, "Forbidden", forbidden_message(user, attrs), details)

    def _static(self, path: str, parts: list[str], request: web.Request) -> web.StreamResponse | None:
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if path == "/version":
            return dump(discovery.version_info())
        aggregated = discovery.wants_aggregated(request.headers.get("Accept", ""))
        if path in ("/api", "/apis") and aggregated is not None:
            body = discovery.aggregated_json(path == "/api", aggregated)  # built once
            headers = {"Content-Type": discovery.aggregated_type(aggregated), "Vary": "Accept"}
            return web.Response(body=body, headers=headers)
        if path == "/api":
            return dump(discovery.api_versions(f"{request.host}"))
        if path == "/apis":
            return dump(discovery.api_group_list())
        if path == "/api/v1":
            return dump(discovery.api_resource_list("", "v1"))
        if parts[:1] == ["openapi"]:
            doc = openapi.document(parts[1:], request.query)
            if doc is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return json_response(doc)
        if parts[:1] == ["apis"] and len(parts) == 2:
            group = discovery.api_group(parts[1])
            if group is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return dump(group)
        if parts[:1] == ["apis"] and len(parts) == 3:
            resources = discovery.api_resource_list(parts[1], parts[2])
            if resources is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return dump(resources)
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

    # -- reads ---------------------------------------------------------------------------------------

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
        await self._fresh()
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
            return json_response(
                table_json(res, objs, encoded, position, q.get("includeObject", "Metadata"), cont)
            )
        return json_response(list_json(res, target.version, encoded, position, cont))
