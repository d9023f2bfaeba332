"""KEP-4381's CEL templates: a class's ``celTemplate`` expanded with ``object`` = the vendor
parameter object, then decoded into the numeric model's parameter type.

A template is YAML whose ``{{ ... }}`` placeholders are CEL expressions over ``object``::

    kind: Parameters
    apiVersion: counter.dra.config.k8s.io/v1alpha1
    Required: {{object.spec.numberOfFrobnicators}}

Each placeholder's value is written back as a JSON literal (valid YAML: strings quoted, maps and
lists in flow style), the text is parsed, and ``apiVersion`` picks the model. Every failure (a
placeholder that does not compile, a missing field, a result of the wrong type, a model nobody
installed) is a :class:`TemplateError` with one line saying what went wrong; the scheduler shows
it on the claim and the pod, it never raises past that.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import msgspec
import yaml

from draflow.services.dra.cel.errors import CelError
from draflow.services.dra.cel.values import Optional, Uint
from draflow.services.dra.cel.variables import VariableProgram, compile_with_variables
from draflow.services.dra.numeric.labels import selector_error
from draflow.services.dra.numeric.model import ModelDecodeError, NumericModel, decode_model_object
from draflow.services.dra.numeric.registry import ModelRegistry

__all__ = ["Expanded", "TemplateError", "expand", "model_parameters"]

_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.S)
_MAX_TEXT = 64 * 1024


class TemplateError(ValueError):
    """The template cannot produce model parameters for this object (one-line message)."""


@lru_cache(maxsize=512)
def _program(expression: str) -> VariableProgram:
    return compile_with_variables(expression, ("object",))


def _json(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str | float):
        return value
    if isinstance(value, Uint | int):
        return int(value)
    if isinstance(value, Optional):
        raise TemplateError("an optional value must be unwrapped (use .orValue())")
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    return str(value)  # quantities, semvers, durations: their canonical text


_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def expand(template: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The template's data for this object; raises TemplateError. Cached by template and object
    (many claims share one parameter object); callers must not change the result."""
    try:
        key = msgspec.json.encode(obj)
    except (TypeError, msgspec.EncodeError):
        return _expand(template, obj)
    return _expand_cached(template, key)


@lru_cache(maxsize=1024)
def _expand_cached(template: str, encoded: bytes) -> dict[str, Any]:
    return _expand(template, msgspec.json.decode(encoded))


def _expand(template: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    parts: list[str] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(template):
        expression = m.group(1).strip()
        if not expression:
            raise TemplateError(f"empty placeholder at offset {m.start()}")
        try:
            value = _program(expression).evaluate({"object": obj})
        except CelError as exc:
            raise TemplateError(f"{{{{{expression}}}}}: {exc}") from None
        parts.append(template[pos : m.start()])
        parts.append(msgspec.json.encode(_json(value)).decode())
        pos = m.end()
    text = "".join(parts) + template[pos:]
    if len(text) > _MAX_TEXT:
        raise TemplateError(f"expanded template longer than {_MAX_TEXT} bytes")
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TemplateError(f"expanded template is not valid YAML: {first}") from None
    if not isinstance(data, dict):
        raise TemplateError("expanded template is not a mapping")
    return data


class Expanded(msgspec.Struct, frozen=True, kw_only=True):
    """What a template gave for one parameter object."""

    model: Any  # NumericModel (a dataclass, not a Struct field type msgspec knows)
    data: dict[str, Any]  # the expanded text as data (stored in the allocation)
    parameters: Any  # decoded into model.parameters_type


def model_parameters(template: str, obj: Mapping[str, Any], models: ModelRegistry) -> Expanded:
    """Expand and decode into the model's parameter type; raises TemplateError."""
    data = expand(template, obj)
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if not isinstance(api_version, str) or not api_version:
        raise TemplateError("expanded template has no apiVersion")
    model: NumericModel | None = models.for_api_version(api_version)
    if model is None:
        known = ", ".join(models.groups()) or "none"
        raise TemplateError(f"no numeric model serves {api_version} (installed: {known})")
    if kind != model.parameters_kind:
        raise TemplateError(f"kind {kind!r}: model {model.group} expects {model.parameters_kind!r}")
    try:
        params = decode_model_object(model.parameters_type, data)
    except ModelDecodeError as exc:
        raise TemplateError(f"not a valid {api_version} {kind}: {exc}") from None
    problem = selector_error(getattr(params, "selector", None))
    if problem is not None:
        raise TemplateError(f"not a valid {api_version} {kind}: {problem}")
    return Expanded(model=model, data=data, parameters=params)
