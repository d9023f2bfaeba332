"""Pruning and defaulting of a custom object by its structural schema, as apiextensions does.

* Fields the schema does not name are unknown: reported (kubectl's default strict field
  validation refuses them: ``strict decoding error: unknown field "spec.foo"``) and pruned,
  except under ``x-kubernetes-preserve-unknown-fields: true`` or ``additionalProperties``.
* ``null`` in a field that is not ``nullable`` is dropped, then defaulted when it has a default.
* A missing field with a ``default`` gets a copy of it; defaults apply inside array items and map
  values too, and inside the defaulted value itself.

Pure: JSON-like values in, new values out (the input is not changed).
"""

from __future__ import annotations

import copy
from typing import Any

from draflow.services.apiserver.crd.schema import Schema
from draflow.services.apiserver.crd.values import child

__all__ = ["prune_and_default"]


def prune_and_default(value: Any, schema: Schema, path: str, unknown: list[str]) -> Any:
    """``value`` pruned and defaulted; the paths of unknown fields are appended to ``unknown``."""
    if isinstance(value, list):
        if schema.items is None:
            return list(value)
        return [prune_and_default(v, schema.items, f"{path}[{i}]", unknown) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if schema.embedded_resource or (
        schema.preserve_unknown and not schema.properties and schema.additional_properties is None
    ):
        out = dict(value)
        for name, prop in schema.properties.items():
            if name in out:
                out[name] = prune_and_default(out[name], prop, child(path, name), unknown)
        return out
    extra = schema.additional_properties
    out = {}
    for name, item in value.items():
        sub = schema.properties.get(name)
        if sub is None and isinstance(extra, Schema):
            sub = extra
        if sub is None:
            if extra is True or schema.preserve_unknown:
                out[name] = item
            else:
                unknown.append(child(path, name))
            continue
        if item is None and not sub.nullable:
            continue  # pruned; defaulted below when the field has a default
        out[name] = prune_and_default(item, sub, child(path, name), unknown)
    for name, sub in schema.properties.items():
        if name not in out and sub.has_default:
            out[name] = prune_and_default(copy.deepcopy(sub.default), sub, child(path, name), [])
    return out
