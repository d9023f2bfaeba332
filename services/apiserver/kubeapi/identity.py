"""A user's questions about themselves: ``kubectl auth whoami`` and ``kubectl auth can-i``.

``POST /apis/authentication.k8s.io/v1/selfsubjectreviews`` answers with the requester's name, uid
and groups; ``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`` with whether the
requester may do what the review's ``resourceAttributes`` (or ``nonResourceAttributes``) describe,
decided by the same ``kubeapi.authz`` that decides the requests themselves. Every authenticated
user may ask, as upstream.
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from draflow.services.apiserver.kubeapi.authz import Attributes, allowed
from draflow.services.apiserver.kubeapi.http import ApiError, dump
from draflow.services.apiserver.kubeapi.protobuf import ProtobufError, decode_body
from draflow.services.apiserver.kubeapi.resources import resources
from draflow.services.apiserver.kubeapi.tokens import MASTERS, User

__all__ = ["PUBLIC_PATHS", "answer", "review_kind"]

_REVIEWS = {
    ("authentication.k8s.io", "v1", "selfsubjectreviews"): "SelfSubjectReview",
    ("authorization.k8s.io", "v1", "selfsubjectaccessreviews"): "SelfSubjectAccessReview",
}
# what every authenticated user may GET without a resource (upstream's system:discovery and
# system:public-info-viewer roles)
PUBLIC_PATHS = ("/api", "/apis", "/version", "/openapi", "/healthz", "/livez", "/readyz")
_ANONYMOUS = User("system:anonymous", "", (MASTERS,))  # the API without tokens: nothing is refused


def review_kind(parts: list[str]) -> str | None:
    if len(parts) != 4 or parts[0] != "apis":
        return None
    return _REVIEWS.get((parts[1], parts[2], parts[3]))


def _path_allowed(user: User, path: str, verb: str) -> bool:
    if MASTERS in user.groups:
        return True
    public = any(path == p or path.startswith(p + "/") for p in PUBLIC_PATHS)
    return public and verb in ("get", "head")


def _access(user: User, spec: dict[str, Any]) -> bool:
    attrs = spec.get("resourceAttributes")
    if isinstance(attrs, dict):
        group, plural = str(attrs.get("group") or ""), str(attrs.get("resource") or "")
        known = next((r for r in resources() if r.group == group and r.plural == plural), None)
        namespace = str(attrs.get("namespace") or "")
        return allowed(
            user,
            Attributes(
                verb=str(attrs.get("verb") or ""),
                group=group,
                resource=plural,
                namespaced=known.namespaced if known is not None else bool(namespace),
                namespace=namespace if known is None or known.namespaced else "",
                name=str(attrs.get("name") or ""),
                subresource=str(attrs.get("subresource") or ""),
            ),
        )
    other = spec.get("nonResourceAttributes")
    if isinstance(other, dict):
        return _path_allowed(user, str(other.get("path") or ""), str(other.get("verb") or ""))
    raise ApiError(
        422,
        "Invalid",
        "SelfSubjectAccessReview.authorization.k8s.io is invalid: spec.resourceAttributes: "
        "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified",
    )


async def answer(request: web.Request, kind: str, user: User | None) -> web.Response:
    who = user if user is not None else _ANONYMOUS
    raw = await request.read()
    try:
        if request.content_type == "application/vnd.kubernetes.protobuf":  # kubectl's typed client
            body: Any = decode_body(raw)
        else:
            body = msgspec.json.decode(raw) if raw else {}
    except (msgspec.DecodeError, ProtobufError) as exc:
        raise ApiError(
            400, "BadRequest", f"the body of the request was in an unknown format: {exc}"
        ) from None
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the body of the request must be an object")
    if kind == "SelfSubjectReview":
        info: dict[str, Any] = {"username": who.name, "groups": list(who.groups)}
        if who.uid:
            info["uid"] = who.uid
        return dump(
            {
                "kind": kind,
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": None},
                "status": {"userInfo": info},
            },
            201,
        )
    spec = body.get("spec")
    verdict = _access(who, spec if isinstance(spec, dict) else {})
    return dump(
        {
            "kind": kind,
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": {"allowed": verdict},
        },
        201,
    )
