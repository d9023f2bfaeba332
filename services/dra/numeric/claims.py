"""Numeric claims as data: which classic claims are numeric, how their parameters resolve, the
allocation result the KEP asks for, and the condition that reports a template problem.

A classic ``ResourceClaim`` is *numeric* when its ``ResourceClass`` lists ``numericParameters``
(KEP-4381 "ResourceClass extension"). Its ``parametersRef`` names a vendor object (a CRD object
in the claim's namespace); its ``apiGroup`` and ``kind`` select the class's parameter type and
template. A claim without ``parametersRef`` uses the first parameter type's template with an
empty ``object`` (defaults such as the KEP's ``numberOfFrobnicators: 1`` apply through
``orValue``/``has`` in the template, or the template fails and says so).

Vendor objects are read generically: :func:`as_json` turns whatever the object state holds (a
served kind's Struct, or the plain JSON a CustomResourceDefinition's objects are) into the JSON
object the template sees.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import encode_object
from draflow.events.api.meta import Condition
from draflow.services.dra.numeric.model import encode_model_object
from draflow.services.dra.numeric.registry import ModelRegistry
from draflow.services.dra.numeric.template import Expanded, TemplateError, model_parameters

__all__ = [
    "CONDITION",
    "NotReady",
    "ObjectLookup",
    "Resolved",
    "as_json",
    "build_allocation",
    "is_numeric_class",
    "parameter_type",
    "resolve",
    "template_condition",
]

CONDITION = "NumericParameters"

# (apiGroup, kind, namespace, name) -> the object (any shape as_json reads) or None
ObjectLookup = Callable[[str, str, str, str], Any]


def is_numeric_class(cls: cv.ResourceClass | None) -> bool:
    return cls is not None and bool(cls.numeric_parameters)


def as_json(obj: Any) -> dict[str, Any] | None:
    """A vendor object as JSON (apiVersion, kind, metadata, ...); None when it is none."""
    if obj is None:
        return None
    if isinstance(obj, ApiStruct):
        return encode_object(obj)
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, msgspec.Struct):
        out = msgspec.to_builtins(obj)
        return out if isinstance(out, dict) else None
    return None


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def parameter_type(cls: cv.ResourceClass, api_group: str, kind: str) -> cv.NumericParameterType | None:
    """The class's entry for objects of this group and kind (first match)."""
    for nt in cls.numeric_parameters:
        if nt.kind == kind and (not nt.api_version or _group(nt.api_version) == api_group):
            return nt
    return None


class Resolved(msgspec.Struct, frozen=True, kw_only=True):
    """A numeric claim's parameters, ready for the model's controller."""

    parameter_type: cv.NumericParameterType
    vendor: dict[str, Any]
    expanded: Expanded


class NotReady(Exception):
    """The claim cannot be resolved *yet* (its parameter object does not exist): wait."""


def resolve(
    claim: cv.ResourceClaim, cls: cv.ResourceClass, lookup: ObjectLookup, models: ModelRegistry
) -> Resolved:
    """Raises NotReady (missing object) or TemplateError (names class, template and error)."""
    ref = claim.spec.parameters_ref
    if ref is None:
        nt = cls.numeric_parameters[0]
        vendor: dict[str, Any] = {}
    else:
        found = parameter_type(cls, ref.api_group, ref.kind)
        if found is None:
            allowed = ", ".join(f"{t.api_version or '*'}/{t.kind}" for t in cls.numeric_parameters)
            group = ref.api_group or "core"
            raise TemplateError(
                f"class {cls.metadata.name}: parameters of kind {ref.kind} ({group}) are not allowed "
                f"(allowed: {allowed})"
            )
        nt = found
        got = as_json(lookup(ref.api_group, ref.kind, claim.metadata.namespace, ref.name))
        if got is None:
            raise NotReady(f"parameters {ref.kind} {claim.metadata.namespace}/{ref.name} not found")
        vendor = got
        if nt.api_version:
            vendor = {**vendor, "apiVersion": nt.api_version}
    try:
        expanded = model_parameters(nt.cel_template, vendor, models)
    except TemplateError as exc:
        what = f"{nt.api_version}/{nt.kind}" if nt.api_version else nt.kind
        raise TemplateError(f"class {cls.metadata.name}, template for {what}: {exc}") from None
    return Resolved(parameter_type=nt, vendor=vendor, expanded=expanded)


def build_allocation(
    cls: cv.ResourceClass, resolved: Resolved, node: str, allocation: Any
) -> cv.NumericAllocation:
    """KEP: the allocation embeds the class and the parameter object, so the claim stays usable
    after both are deleted, plus the model's allocation for the node plugin."""
    model = resolved.expanded.model
    return cv.NumericAllocation(
        node_name=node,
        driver_name=cls.driver_name,
        api_version=model.api_version,
        kind=model.allocation_kind,
        data=encode_model_object(allocation),
        model_parameters=resolved.expanded.data,
        resource_class=encode_object(cls),
        parameters=resolved.vendor or None,
        shareable=resolved.parameter_type.shareable,
    )


def template_condition(message: str) -> Condition:
    return Condition(type=CONDITION, status="False", reason="TemplateFailed", message=message)
