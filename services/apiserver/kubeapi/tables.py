"""Server-side printing: ``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``.

kubectl asks for a Table and prints its cells; the columns are ``draflow get``'s own
(``draflow.services.runtime.printers``), so ``kubectl get`` and ``draflow get`` print the same thing.
Wide-only columns have priority 1 (``-o wide``). Each row carries the object as requested by
``includeObject``: ``Metadata`` (default, a PartialObjectMetadata: kubectl reads the namespace and
labels from it), ``Object`` or ``None``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import msgspec

from draflow.events.api.base import ApiStruct
from draflow.services.apiserver.kubeapi.resources import Resource
from draflow.services.runtime import printers

__all__ = ["column_definitions", "table_json"]

_encode = msgspec.json.Encoder().encode

_DESCRIPTIONS = {
    "NAME": "Name must be unique within a namespace. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    "AGE": "CreationTimestamp is a timestamp representing the server time when this object was created.",
}


@lru_cache(maxsize=64)
def _definitions(kind: str) -> tuple[list[dict[str, Any]], list[Any]]:
    narrow = {h for h, _ in printers.columns(kind, False)}
    defs, getters = [], []
    for header, get in printers.columns(kind, True):
        col: dict[str, Any] = {
            "name": header,
            "type": "string",
            "format": "name" if header == "NAME" else "",
            "description": _DESCRIPTIONS.get(header, header.lower()),
            "priority": 0 if header in narrow else 1,
        }
        defs.append(col)
        getters.append(get)
    return defs, getters


@lru_cache(maxsize=64)
def column_definitions(kind: str) -> bytes:
    return _encode(_definitions(kind)[0])


def table_json(
    res: Resource,
    objs: list[ApiStruct],
    encoded: list[bytes],
    resource_version: int,
    include: str,
    cont: str = "",
    *,
    definitions: bool = True,
) -> bytes:
    """``definitions=False``: ``"columnDefinitions":[]`` (a watch's events after its first)."""
    _, getters = _definitions(res.kind)
    rows: list[bytes] = []
    for obj, data in zip(objs, encoded, strict=True):
        as_dict = msgspec.json.decode(data)
        cells = _encode([get(as_dict) for get in getters])
        if include == "None":
            rows.append(b'{"cells":' + cells + b"}")
        elif include == "Object":
            rows.append(b'{"cells":' + cells + b',"object":' + data + b"}")
        else:
            rows.append(
                b'{"cells":'
                + cells
                + b',"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":'
                + _encode(obj.metadata)  # type: ignore[attr-defined]
                + b"}}"
            )
    meta: dict[str, Any] = {"resourceVersion": str(resource_version)}
    if cont:
        meta["continue"] = cont
    head = (
        b'{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":'
        + _encode(meta)
        + b',"columnDefinitions":'
        + (column_definitions(res.kind) if definitions else b"[]")
        + b',"rows":['
    )
    return head + b",".join(rows) + b"]}"
