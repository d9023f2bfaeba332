"""What every handler of the Kubernetes API shares: refusals as ``metav1.Status``, JSON
responses, the request's target (resource, version, namespace, name, subresource) and the store
access and apiserver calls both reads and writes make."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from draflow.events.api.base import ApiStruct
from draflow.infra.eventstore import acting_for
from draflow.services.apiserver.kubeapi.encoding import EncodingCache, status_json
from draflow.services.apiserver.kubeapi.resources import Resource
from draflow.services.apiserver.kubeapi.watch import WatchCache
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import ReplyIn, Status, StatusError
from draflow.services.runtime.store import ApiStore

__all__ = [
    "JSON",
    "ApiError",
    "Handlers",
    "Target",
    "dump",
    "gk",
    "json_response",
    "qualified",
    "user_agent_manager",
]

JSON = "application/json"


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
            content_type=JSON,
        )


def json_response(data: bytes, status: int = 200) -> web.Response:
    return web.Response(body=data, status=status, content_type=JSON)


def dump(value: Any, status: int = 200) -> web.Response:
    return json_response(msgspec.json.encode(value), status)


@dataclass(frozen=True)
class Target:
    res: Resource
    version: str
    namespace: str | None  # None: all namespaces (or cluster-scoped)
    name: str = ""
    sub: str = ""


class Handlers:
    """State and helpers of the handlers (``KubeApi`` combines the reads and ``Writes``)."""

    api: ApiServer
    store: ApiStore
    encodings: EncodingCache
    watches: WatchCache
    fresh_timeout_s = 5.0  # a replica's wait to fold what the log holds before a read (then 504)
    # a replica's way to the control plane's apiserver: its writes are admitted there (one quota
    # decision, one write lock), never appended by the replica itself
    control_plane: ApiClient | None = None

    async def _fresh(self) -> None:
        """A replica (``--kube-api-only``) reads as fresh as the log: it asks the log for its last
        sequence and waits until it has folded that far (upstream's consistent reads from the
        watch cache ask etcd for its revision the same way). The control plane's apiserver answers
        from memory at once, as its NATS API does (it folds the writes it admits before replying)."""
        if self.api.requests:
            return
        head = await self.api.events.stream_last_seq()
        if head > self.store.position:
            try:
                await self.store.wait_position(head, self.fresh_timeout_s)
            except TimeoutError:
                raise ApiError(
                    504, "Timeout", f"the log is at {head}, this apiserver at {self.store.position}"
                ) from None

    def _stored(self, target: Target) -> ApiStruct:
        obj = self.store.index.get(target.res.kind, target.namespace or "", target.name)
        if obj is None:
            raise ApiError(
                404,
                "NotFound",
                f'{qualified(target.res)} "{target.name}" not found',
                {"name": target.name, **gk(target.res)},
            )
        return obj

    async def _call(self, verb: str, req: msgspec.Struct, target: Target | None = None) -> ReplyIn:
        """One apiserver call; a refusal names ``target`` in its details (kind and name), as
        upstream's Status does (kubectl: ``The Pod "p" is invalid: ...``)."""
        if self.control_plane is None:
            reply = await self.api.handle(verb, msgspec.json.encode(req))
            out = msgspec.json.decode(msgspec.json.encode(reply), type=ReplyIn)
        else:
            try:
                out = await self.control_plane.forward(verb, msgspec.json.encode(req), acting_for.get())
            except StatusError as exc:  # no apiserver answers, or not in time
                raise ApiError.of(exc.status) from None
            if out.error is None:
                await self._fresh()  # what the handler reads next includes the write
        if out.error is not None:
            if target is not None:
                raise ApiError.of(out.error, target.res, target.name)
            raise ApiError.of(out.error)
        return out

    def _get(self, target: Target) -> web.Response:
        return json_response(self.encodings.get(target.res, self._stored(target), target.version))

    def _as_dict(self, target: Target, obj: ApiStruct) -> dict[str, Any]:
        data: dict[str, Any] = msgspec.json.decode(self.encodings.get(target.res, obj, target.version))
        return data


def qualified(res: Resource) -> str:
    return f"{res.plural}.{res.group}" if res.group else res.plural


def gk(res: Resource) -> dict[str, str]:
    return {"group": res.group, "kind": res.plural} if res.group else {"kind": res.plural}


def user_agent_manager(request: web.Request) -> str:
    """Upstream's default field manager: the user agent's program name (``kubectl``)."""
    agent = request.headers.get("User-Agent", "")
    return agent.split("/", 1)[0][:128] if agent else "unknown"
