"""Admission of a custom object by its CRD: version, status subresource, pruning, defaulting,
schema validation and CEL rules; and the metadata rules every custom object follows.

``admit_custom`` is what the apiserver runs on a create or update before the generic steps
(uid, timestamps, finalizers...). An unknown field is a strict decoding error (kubectl's default
field validation); every other problem is a field error of the Invalid refusal. The object is
returned in the CRD's storage version (versions share one schema shape: conversion ``None``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from msgspec.structs import replace

from draflow.events.api import apiextensions_v1 as ax
from draflow.events.api.errors import UNKNOWN_FIELD, ApiError, FieldError
from draflow.services.apiserver.crd.defaults import prune_and_default
from draflow.services.apiserver.crd.rules import MISSING, evaluate_rules
from draflow.services.apiserver.crd.schema import Schema, parse_schema
from draflow.services.apiserver.crd.values import validate_value
from draflow.services.dra.validation import names
from draflow.services.dra.validation.errs import Errs
from draflow.services.dra.validation.meta import validate_meta_update, validate_object_meta

__all__ = ["admit_custom", "admit_custom_status", "crd_version", "status_enabled", "validate_custom_meta"]


def crd_version(
    crd: ax.CustomResourceDefinition, api_version: str
) -> ax.CustomResourceDefinitionVersion | None:
    version = api_version.rsplit("/", 1)[-1]
    for v in crd.spec.versions:
        if v.name == version and v.served:
            return v
    return None


def status_enabled(crd: ax.CustomResourceDefinition, version: ax.CustomResourceDefinitionVersion) -> bool:
    return version.subresources is not None and version.subresources.status is not None


@lru_cache(maxsize=256)
def _schema(crd_uid: str, crd_rv: str, version: str, raw_json: str) -> Schema:
    import json

    return parse_schema(json.loads(raw_json))


def version_schema(crd: ax.CustomResourceDefinition, version: ax.CustomResourceDefinitionVersion) -> Schema:
    """The parsed schema of a version (cached per CRD resourceVersion)."""
    import json

    raw = version.schema.open_apiv3_schema if version.schema is not None else None
    return _schema(
        crd.metadata.uid, crd.metadata.resource_version, version.name, json.dumps(raw or {"type": "object"})
    )


def _root(obj: ax.CustomObject, content: dict[str, Any]) -> dict[str, Any]:
    """The value the schema and the rules see: apiVersion, kind, the name fields of metadata."""
    meta: dict[str, Any] = {}
    if obj.metadata.name:
        meta["name"] = obj.metadata.name
    if obj.metadata.generate_name:
        meta["generateName"] = obj.metadata.generate_name
    return {"apiVersion": obj.api_version, "kind": obj.kind, "metadata": meta, **content}


def admit_custom_status(
    stored: ax.CustomObject, status: Any, crd: ax.CustomResourceDefinition
) -> ax.CustomObject:
    """A write of the status subresource: the stored object with ``status`` replaced, pruned,
    defaulted and validated as a whole (ApiError otherwise)."""
    content = {k: v for k, v in stored.content.items() if k != "status"}
    if status is not None:
        content["status"] = status
    return admit_custom(replace(stored, content=content), crd, stored, status_write=True)


def admit_custom(
    obj: ax.CustomObject,
    crd: ax.CustomResourceDefinition,
    old: ax.CustomObject | None,
    *,
    status_write: bool = False,
) -> ax.CustomObject:
    """The object as stored, or ApiError (decode errors for unknown fields, else field errors).
    ``status_write``: the status subresource writes, so the status is the object's own."""
    meta = obj.metadata
    name = meta.name or meta.generate_name
    version = crd_version(crd, obj.api_version)
    if version is None:  # the registry served it a moment ago: the CRD changed meanwhile
        raise ApiError(
            [
                FieldError(
                    kind=obj.kind,
                    name=name,
                    rule=f'no matches for kind "{obj.kind}" in version "{obj.api_version}"',
                )
            ]
        )
    schema = version_schema(crd, version)
    content = dict(obj.content)
    if status_enabled(crd, version) and not status_write:  # status only through the subresource
        content.pop("status", None)
        if old is not None and "status" in old.content:
            content["status"] = old.content["status"]
    unknown: list[str] = []
    root = _root(obj, content)
    pruned = prune_and_default(
        {k: v for k, v in root.items() if k != "metadata"}, _without_meta(schema), "", unknown
    )
    if unknown:
        raise ApiError(
            [
                FieldError(kind=obj.kind, namespace=meta.namespace, name=name, path=p, type=UNKNOWN_FIELD)
                for p in unknown
            ]
        )
    content = {k: v for k, v in pruned.items() if k not in ("apiVersion", "kind")}
    errs = Errs(obj.kind, meta.namespace, name)
    checked = {**pruned, "metadata": root["metadata"]}
    validate_value(checked, schema, "", errs)
    old_root: Any = MISSING
    if old is not None:
        old_root = _root(old, dict(old.content))
    evaluate_rules(checked, old_root, schema, "", errs)
    if errs.items:
        raise ApiError(errs.items)
    storage = f"{crd.spec.group}/{ax.storage_version(crd)}"
    return replace(obj, api_version=storage, content=content)


def _without_meta(schema: Schema) -> Schema:
    """Pruning never touches metadata (decoded strictly already) nor apiVersion/kind."""
    props = {k: v for k, v in schema.properties.items() if k != "metadata"}
    for key in ("apiVersion", "kind"):
        props.setdefault(key, Schema(type="string"))
    return replace_schema(schema, props)


def replace_schema(schema: Schema, properties: dict[str, Schema]) -> Schema:
    import dataclasses

    return dataclasses.replace(schema, properties=properties, rules=(), required=())


def validate_custom_meta(
    errs: Errs, obj: ax.CustomObject, old: ax.CustomObject | None, namespaced: bool
) -> None:
    """Metadata as upstream checks it for custom resources (names are DNS subdomains)."""
    validate_object_meta(errs, obj.metadata, namespaced=namespaced, name_check=names.dns1123_subdomain)
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
