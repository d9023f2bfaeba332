"""Serving custom resources in this process: the kinds of the CustomResourceDefinitions seen.

The registry (``draflow.events.api.registry``) is what decodes manifests and resolves resource
names; a CRD's kind is added to it when the CRD is created or changed and removed when it is
deleted. Every process that folds the log through an ``ApiStore`` (the apiserver, controllers'
caches) calls :func:`on_crd_change`; the CLI asks the apiserver for the CRDs
(:func:`serve_crds`), as kubectl reads discovery.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from draflow.events.api.apiextensions_v1 import CustomResourceDefinition, custom_resource
from draflow.events.api.registry import lookup_resource, register_custom, unregister_custom
from draflow.projections.objects import Change

__all__ = ["CRD_KIND", "is_custom_kind", "on_crd_change", "serve_crd", "serve_crds"]

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
        unregister_custom(crd.metadata.name)
    else:
        serve_crd(crd)


def is_custom_kind(kind: str) -> bool:
    rt = lookup_resource(kind)
    return rt is not None and bool(rt.crd)
