"""Serving custom resources in this process: the kinds of the CustomResourceDefinitions seen.

The registry (``draflow.events.api.registry``) is what decodes manifests and resolves resource
names; a CRD's kind is added to it when the CRD is created or changed and removed when it is
deleted. Every process that folds the log through an ``ApiStore`` (the apiserver, controllers'
caches) calls :func:`on_crd_change`; the CLI asks the apiserver for the CRDs
(:func:`serve_crds`), as kubectl reads discovery.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from typing import Any

from draflow.events.api.apiextensions_v1 import (
    CustomResourceColumnDefinition,
    CustomResourceDefinition,
    custom_resource,
    storage_version,
)
from draflow.events.api.registry import custom_crds, lookup_resource, register_custom, unregister_custom
from draflow.projections.objects import Change
from draflow.services.runtime import printers

__all__ = ["CRD_KIND", "column_getter", "is_custom_kind", "on_crd_change", "serve_crd", "serve_crds"]

CRD_KIND = CustomResourceDefinition.KIND

log = logging.getLogger(__name__)


def serve_crd(crd: CustomResourceDefinition) -> bool:
    """Serve the CRD's kind (names, versions) in this process; False when it cannot be served
    (a clash with another kind, which the CRD's admission refuses before it is stored)."""
    try:
        rt, wires = custom_resource(crd)
        if not rt.kind or not rt.plural:
            return False
        register_custom(rt, wires)
    except ValueError as exc:
        log.warning("CustomResourceDefinition %s is not served: %s", crd.metadata.name, exc)
        return False
    version = next((v for v in crd.spec.versions if v.name == storage_version(crd)), None)
    cols = version.additional_printer_columns if version is not None else ()
    printers.set_columns(
        rt.kind, [(c.name.upper(), column_getter(c), c.priority > 0) for c in cols] if cols else None
    )
    return True


def serve_crds(crds: Iterable[CustomResourceDefinition]) -> None:
    for crd in crds:
        serve_crd(crd)


def on_crd_change(change: Change) -> None:
    """Keep the registry in step with one CRD change (from the log or this process's append)."""
    crd = change.object
    if not isinstance(crd, CustomResourceDefinition):
        return
    if change.type == "DELETED":
        rt = custom_crds().get(crd.metadata.name)
        if rt is not None:
            printers.set_columns(rt.kind, None)
        unregister_custom(crd.metadata.name)
    else:
        serve_crd(crd)


def is_custom_kind(kind: str) -> bool:
    rt = lookup_resource(kind)
    return rt is not None and bool(rt.crd)


_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\['([^']*)'\]")


def _walk(obj: Any, path: str) -> Any:
    """A printer column's simple JSONPath (``.spec.x``, ``.status.list[0].name``, ``['a.b']``)."""
    for field, index, quoted in _STEP.findall(path.strip().strip("{}")):
        if index:
            obj = obj[int(index)] if isinstance(obj, list) and int(index) < len(obj) else None
        else:
            obj = obj.get(field or quoted) if isinstance(obj, dict) else None
        if obj is None:
            return None
    return obj


def column_getter(col: CustomResourceColumnDefinition) -> printers.Getter:
    """The cell of one printer column, as kubectl shows it (dates as ages, missing as <none>)."""

    def get(obj: dict[str, Any]) -> str:
        value = _walk(obj, col.json_path)
        if value is None:
            return "<none>"
        if col.type == "date":
            return printers.age(value)
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, dict | list):
            return json.dumps(value, separators=(",", ":"))
        return str(value)

    return get
