"""OpenAPI v3 (``/openapi/v3``) and v2 (``/openapi/v2``) documents generated from the Structs.

Enough for what kubectl does with them: ``kubectl explain`` finds a kind's schema by its
``x-kubernetes-group-version-kind`` and walks ``properties``/``$ref``/``items``; ``kubectl apply``
and ``create`` look for the ``fieldValidation`` (and ``dryRun``) query parameter on the kind's
PATCH operation to decide that the server validates fields itself (draflow always decodes
strictly, as ``fieldValidation=Strict``), so kubectl does no client-side validation. Schemas come
from msgspec's JSON Schema of each storage Struct (the class docstrings become descriptions);
``apiVersion`` and ``kind`` are added to the top-level kinds, Optional fields become
``nullable``.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

import msgspec
from multidict import MultiMapping

from draflow.services.apiserver.kubeapi.resources import Resource, group_versions, resources

__all__ = ["document"]

_REF = "#/components/schemas/{name}"
_PARAMS = [
    {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
    for name in ("dryRun", "fieldManager", "fieldValidation", "force")
]


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _clean(schema: Any) -> Any:
    """JSON Schema (msgspec) -> OpenAPI 3.0: ``anyOf [X, null]`` -> ``X`` with ``nullable``."""
    if isinstance(schema, list):
        return [_clean(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _clean(v) for k, v in schema.items() if k not in ("title", "$defs")}
    any_of = out.get("anyOf")
    if isinstance(any_of, list):
        rest = [s for s in any_of if s != {"type": "null"}]
        if len(rest) < len(any_of):
            out.pop("anyOf")
            out["nullable"] = True
            if len(rest) == 1:
                inner = rest[0]
                if "$ref" in inner:
                    out["allOf"] = [inner]
                else:
                    out.update(inner)
            else:
                out["anyOf"] = rest
    if out.get("additionalProperties") is False:
        out.pop("additionalProperties")
    return out


def _served(group: str, version: str) -> list[Resource]:
    # custom resources are left out: kubectl then treats them as upstream's CRDs without a
    # published schema (JSON merge patches, no client-side schema)
    return [r for r in resources() if r.group == group and version in r.versions and not r.custom]


def _operations(r: Resource, group: str, version: str) -> dict[str, Any]:
    gvk = {"group": group, "version": version, "kind": r.wire_kind}
    base = f"/{_gv_path(group, version)}"
    coll = f"{base}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{base}/{r.plural}"
    ref = {"$ref": _REF.format(name=r.wire_struct(version).__name__)}
    body = {"content": {"application/json": {"schema": ref}}}
    ok = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}

    def op(action: str, params: bool = True, with_body: bool = False) -> dict[str, Any]:
        o: dict[str, Any] = {
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
            "responses": ok,
        }
        if params:
            o["parameters"] = _PARAMS
        if with_body:
            o["requestBody"] = body
        return o

    item = {
        "get": op("get", params=False),
        "put": op("put", with_body=True),
        "patch": op("patch", with_body=True),
        "delete": op("delete"),
    }
    return {
        coll: {"get": op("list", params=False), "post": op("post", with_body=True)},
        f"{coll}/{{name}}": item,
    }


@lru_cache(maxsize=32)
def _gv_doc(group: str, version: str) -> bytes:
    served = _served(group, version)
    _, comps = msgspec.json.schema_components([r.wire_struct(version) for r in served], ref_template=_REF)
    schemas = {name: _clean(s) for name, s in comps.items()}
    for r in served:
        top = schemas[r.wire_struct(version).__name__]
        props = top.setdefault("properties", {})
        props["apiVersion"] = {
            "type": "string",
            "description": "APIVersion defines the versioned schema of this representation of an object.",
        }
        props["kind"] = {
            "type": "string",
            "description": "Kind is a string value representing the REST resource this object represents.",
        }
        top["x-kubernetes-group-version-kind"] = [{"group": group, "version": version, "kind": r.wire_kind}]
    paths: dict[str, Any] = {}
    for r in served:
        paths.update(_operations(r, group, version))
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (draflow)", "version": "v1.37.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }
    return msgspec.json.encode(doc)


@lru_cache(maxsize=1)
def _root() -> bytes:
    paths = {}
    for group, version in group_versions():
        digest = hashlib.sha512(_gv_doc(group, version)).hexdigest()[:32].upper()
        path = _gv_path(group, version)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return msgspec.json.encode({"paths": paths})


@lru_cache(maxsize=1)
def _v2() -> bytes:
    """Swagger 2.0: every kind's definitions (for clients that still read v2)."""
    definitions: dict[str, Any] = {}
    for group, version in group_versions():
        doc = msgspec.json.decode(_gv_doc(group, version))
        for name, schema in doc["components"]["schemas"].items():
            definitions.setdefault(name, schema)
    text = msgspec.json.encode(definitions).replace(b"#/components/schemas/", b"#/definitions/")
    head = b'{"swagger":"2.0","info":{"title":"Kubernetes (draflow)","version":"v1.37.0"},"paths":{}'
    return head + b',"definitions":' + text + b"}"


def document(parts: list[str], query: MultiMapping[str]) -> bytes | None:
    """The document at ``/openapi/<parts...>``, or None."""
    if parts == ["v2"]:
        return _v2()
    if parts == ["v3"]:
        return _root()
    if parts[:1] == ["v3"]:
        rest = parts[1:]
        if rest[:1] == ["api"] and len(rest) == 2:
            group, version = "", rest[1]
        elif rest[:1] == ["apis"] and len(rest) == 3:
            group, version = rest[1], rest[2]
        else:
            return None
        if (group, version) not in group_versions():
            return None
        return _gv_doc(group, version)
    return None
