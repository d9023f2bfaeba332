"""One admission entry point for every served kind, structured and classic (KEP-3063).

The classic kinds (``cdi.k8s.io/v1alpha1`` ResourceClass and ResourceClaim, the ACME driver's
``NodeGpuCapacity``) have their own defaulting and validation (``admission.classic``); a Pod is
checked as core/v1 *and* for its KEP part (the ``cdi.k8s.io/pod-resources`` annotation that
``normalize_manifest`` wrote). The apiserver's create, update and status paths call these, so no
path can forget one of the two.
"""

from __future__ import annotations

from typing import TypeVar

from msgspec.structs import replace

from draflow.events.api import acme_gpu_v1alpha1 as acme
from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import core_v1 as c1
from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api import workloads_v1 as w1
from draflow.events.api.base import ApiStruct
from draflow.events.api.classic_pod import POD_RESOURCES_ANNOTATION
from draflow.events.api.errors import ApiError, FieldError
from draflow.services.apiserver.admission.defaults import apply_defaults
from draflow.services.apiserver.admission.validate import validate
from draflow.services.dra.classic.validation import (
    admit_classic,
    apply_classic_defaults,
    validate_classic,
    validate_kep_pod,
)

__all__ = ["CLASSIC_TYPES", "admit_create", "default_object", "is_classic", "validate_object"]

S = TypeVar("S", bound=ApiStruct)

CLASSIC_TYPES = (cv.ResourceClass, cv.ResourceClaim, acme.NodeGpuCapacity, nv.NodeResourceCapacity)


def is_classic(obj: ApiStruct) -> bool:
    return isinstance(obj, CLASSIC_TYPES)


def default_object(obj: S, namespace: str = "default") -> S:
    """The object as stored (defaults applied), whatever its API."""
    if is_classic(obj):
        return apply_classic_defaults(obj, namespace)
    return apply_defaults(obj, namespace)


def validate_object(obj: ApiStruct, old: ApiStruct | None = None) -> list[FieldError]:
    """Every problem of a (defaulted) create, update or status write (``old`` = the stored one)."""
    if is_classic(obj):
        return validate_classic(obj, old)
    problems = validate(obj, old)
    if isinstance(obj, c1.Pod):
        problems = problems + validate_kep_pod(obj)
    elif isinstance(obj, w1.Deployment | w1.Job):
        problems = problems + _kep_template(obj)
    return problems


def _kep_template(obj: w1.Deployment | w1.Job) -> list[FieldError]:
    """The KEP part of a workload's pod template (``normalize_manifest`` put it in the template's
    annotation), checked as the Pods made from it will be, with paths under ``spec.template``.
    The Pods' names are generated later; the workload's name stands in for them."""
    template = obj.spec.template
    if POD_RESOURCES_ANNOTATION not in template.metadata.annotations:
        return []
    meta = replace(template.metadata, name=obj.metadata.name, namespace=obj.metadata.namespace)
    problems = validate_kep_pod(c1.Pod(metadata=meta, spec=template.spec))
    return [
        replace(
            e,
            kind=obj.KIND,
            name=obj.metadata.name,
            path=f"spec.template.{e.path}" if e.path else "spec.template",
        )
        for e in problems
    ]


def admit_create(obj: S, namespace: str = "default") -> S:
    """A create whose client-owned fields are already cleaned (``strategy.prepare_create``):
    default and validate; raises ``ApiError`` listing every problem."""
    if is_classic(obj):
        return admit_classic(obj, None, namespace)
    defaulted = apply_defaults(obj, namespace)
    problems = validate_object(defaulted)
    if problems:
        raise ApiError(problems)
    return defaulted
