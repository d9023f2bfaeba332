"""Objects as the bytes the API returns, encoded once per object version.

An object's JSON is ``{"apiVersion":…,"kind":…`` followed by its Struct's own encoding (msgspec,
in C): no intermediate dicts. Stored objects are immutable and replaced on every change, so a
cache keyed by object identity never serves a stale encoding; LIST, GET and WATCH share it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from draflow.events.api.apiextensions_v1 import CustomObject
from draflow.events.api.base import ApiStruct
from draflow.services.apiserver.kubeapi.resources import Resource
from draflow.services.apiserver.kubeapi.versions import down_convert, needs_conversion

__all__ = ["EncodingCache", "list_json", "object_json", "status_json"]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.decode


def object_json(res: Resource, obj: ApiStruct, version: str = "") -> bytes:
    version = version or res.storage_version
    if isinstance(obj, CustomObject):  # versions of a custom resource differ only in apiVersion
        return _encode({**obj.manifest(), "apiVersion": res.api_version(version)})
    head = f'{{"apiVersion":"{res.api_version(version)}","kind":"{res.wire_kind}",'
    body = _encode(obj)
    data = head.encode() + body[1:] if len(body) > 2 else head.encode()[:-1] + b"}"
    if needs_conversion(res.kind, version):
        data = _encode(down_convert(res.kind, version, _decode(data), res.wire_struct(version)))
    return data


class EncodingCache:
    """(kind, namespace, name) -> (object, version, bytes); at most one entry per object."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, str], tuple[ApiStruct, str, bytes]] = {}

    def get(self, res: Resource, obj: ApiStruct, version: str = "", *, keep: bool = True) -> bytes:
        """``keep=False``: encode without remembering (a deleted object's last state)."""
        if not keep:
            return object_json(res, obj, version)
        meta = obj.metadata  # type: ignore[attr-defined]
        key = (res.kind, meta.namespace, meta.name)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is obj and hit[1] == version:
            return hit[2]
        data = object_json(res, obj, version)
        self._cache[key] = (obj, version, data)
        return data

    def forget(self, kind: str, namespace: str, name: str) -> None:
        self._cache.pop((kind, namespace, name), None)


def list_json(
    res: Resource, version: str, items: list[bytes], resource_version: int, cont: str = ""
) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(resource_version)}
    if cont:
        meta["continue"] = cont
    head = (
        f'{{"kind":"{res.wire_kind}List","apiVersion":"{res.api_version(version)}",'
        f'"metadata":{_encode(meta).decode()},"items":['
    ).encode()
    return head + b",".join(items) + b"]}"


def status_json(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    """A metav1.Status (Failure, or Success for code < 400)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
    }
    if code >= 400:
        body["message"] = message
        body["reason"] = reason
    if details:
        body["details"] = details
    body["code"] = code
    return _encode(body)


def decode(data: bytes) -> Any:
    return _decode(data)
