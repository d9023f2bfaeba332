"""Validate a custom object's value against its (structural) schema, worded as upstream.

apiextensions-apiserver runs kube-openapi's validator and maps each result to a field error:
``Required value``, ``Unsupported value`` for enums, ``Too long`` / ``Too many`` for maxLength /
maxItems / maxProperties, and ``Invalid value: <value>: <path> in body ...`` for the rest, where
the detail is kube-openapi's sentence (``spec.replicas in body should be less than or equal to
10``). Pure: values are JSON-like (dict, list, str, int, float, bool, None).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
from collections.abc import Callable
from typing import Any

from draflow.events.api.errors import DUPLICATE, NOT_SUPPORTED, TOO_LONG
from draflow.services.apiserver.crd.schema import Schema
from draflow.services.dra.validation.errs import Errs, show

__all__ = ["child", "json_type", "number", "validate_value"]


def child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def json_type(value: Any) -> str:
    """The JSON type of a value as kube-openapi names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def number(v: float) -> str:
    """A bound as Go's ``%v`` prints a float64 (16, 1.5, 1e+21)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if v == int(v) and abs(v) < 1e21:
        return str(int(v))
    text = repr(v)
    return text.replace("e+0", "e+").replace("e-0", "e-")


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _matches_type(schema: Schema, value: Any) -> bool:
    t = json_type(value)
    if schema.int_or_string:
        return t in ("integer", "string")
    if not schema.type:
        return True
    if schema.type == "number":
        return t in ("integer", "number")
    return t == schema.type


_DATE = r"\d{4}-\d{2}-\d{2}"
_FORMATS: dict[str, Callable[[str], bool]] = {}


def _fmt(name: str, pattern: str) -> None:
    rx = re.compile(pattern)
    _FORMATS[name] = lambda s: rx.fullmatch(s) is not None


_fmt("date", _DATE)
_fmt("date-time", _DATE + r"[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
_fmt("uuid", r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_fmt("uuid3", r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-3[0-9a-fA-F]{3}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_fmt("uuid4", r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}")
_fmt("uuid5", r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-5[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}")
_fmt("mac", r"([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}")
_fmt(
    "hostname",
    r"(?=.{1,255}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*",
)
_fmt("email", r"[^@\s]+@[^@\s]+\.[^@\s]+")
_fmt("duration", r"(\d+(\.\d+)?\s*(ns|us|µs|ms|s|m|h|d|w)\s*)+")


def _ip(version: int) -> Callable[[str], bool]:
    def check(s: str) -> bool:
        try:
            return ipaddress.ip_address(s).version == version
        except ValueError:
            return False

    return check


def _cidr(s: str) -> bool:
    try:
        ipaddress.ip_network(s, strict=False)
    except ValueError:
        return False
    return "/" in s


def _byte(s: str) -> bool:
    try:
        base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


_FORMATS.update({"ipv4": _ip(4), "ipv6": _ip(6), "cidr": _cidr, "byte": _byte})


def validate_value(value: Any, schema: Schema, path: str, errs: Errs) -> None:
    """Add every problem of ``value`` at ``path`` (``""`` for the object root) to ``errs``."""
    shown = path or "body"
    if value is None:
        if schema.nullable or (not schema.type and not schema.int_or_string):
            return
        want = schema.type_name() or "object"
        errs.invalid(path, "", f'{shown} in body must be of type {want}: "null"')
        return
    if not _matches_type(schema, value):
        errs.invalid(
            path, value, f'{shown} in body must be of type {schema.type_name()}: "{json_type(value)}"'
        )
        return
    if schema.enum is not None and not any(_same(value, e) for e in schema.enum):
        supported = ", ".join(_quote(e) if isinstance(e, str) else json.dumps(e) for e in schema.enum)
        errs.add(path, NOT_SUPPORTED, f"{NOT_SUPPORTED}: {show(value)}: supported values: {supported}")
    if isinstance(value, str):
        _string(value, schema, path, shown, errs)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _number(value, schema, path, shown, errs)
    elif isinstance(value, list):
        _array(value, schema, path, shown, errs)
    elif isinstance(value, dict):
        _object(value, schema, path, shown, errs)
    _combinators(value, schema, path, shown, errs)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def _string(value: str, s: Schema, path: str, shown: str, errs: Errs) -> None:
    if s.max_length is not None and len(value) > s.max_length:
        unit = "byte" if s.max_length == 1 else "bytes"
        errs.add(path, TOO_LONG, f"{TOO_LONG}: may not be more than {s.max_length} {unit}")
    if s.min_length is not None and len(value) < s.min_length:
        errs.invalid(path, value, f"{shown} in body should be at least {s.min_length} chars long")
    if s.compiled_pattern is not None and not s.compiled_pattern.search(value):
        errs.invalid(path, value, f"{shown} in body should match '{s.pattern}'")
    check = _FORMATS.get(s.format)
    if check is not None and not check(value):
        errs.invalid(path, value, f"{shown} in body must be of type {s.format}: {_quote(value)}")


def _number(value: float, s: Schema, path: str, shown: str, errs: Errs) -> None:
    if s.multiple_of and (value / s.multiple_of) != int(value / s.multiple_of):
        errs.invalid(path, value, f"{shown} in body should be a multiple of {number(s.multiple_of)}")
    if s.maximum is not None:
        if s.exclusive_maximum and value >= s.maximum:
            errs.invalid(path, value, f"{shown} in body should be less than {number(s.maximum)}")
        elif not s.exclusive_maximum and value > s.maximum:
            errs.invalid(path, value, f"{shown} in body should be less than or equal to {number(s.maximum)}")
    if s.minimum is not None:
        if s.exclusive_minimum and value <= s.minimum:
            errs.invalid(path, value, f"{shown} in body should be greater than {number(s.minimum)}")
        elif not s.exclusive_minimum and value < s.minimum:
            errs.invalid(
                path, value, f"{shown} in body should be greater than or equal to {number(s.minimum)}"
            )


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _array(value: list[Any], s: Schema, path: str, shown: str, errs: Errs) -> None:
    if s.max_items is not None and len(value) > s.max_items:
        errs.too_many(path, len(value), s.max_items)
    if s.min_items is not None and len(value) < s.min_items:
        errs.invalid(path, value, f"{shown} in body should have at least {s.min_items} items")
    if s.unique_items and len({_key(v) for v in value}) != len(value):
        errs.invalid(path, value, f"{shown} in body shouldn't contain duplicates")
    if s.items is not None:
        for i, item in enumerate(value):
            validate_value(item, s.items, f"{path}[{i}]", errs)
    if s.list_type in ("set", "map"):
        seen: set[str] = set()
        for i, item in enumerate(value):
            if s.list_type == "map" and isinstance(item, dict):
                key = _key({k: item.get(k) for k in s.list_map_keys})
                dup: Any = {k: item[k] for k in s.list_map_keys if k in item}
            else:
                key, dup = _key(item), item
            if key in seen:
                errs.add(f"{path}[{i}]", DUPLICATE, f"{DUPLICATE}: {show(dup)}")
            seen.add(key)


def _object(value: dict[str, Any], s: Schema, path: str, shown: str, errs: Errs) -> None:
    for name in s.required:
        if name not in value:
            errs.required(child(path, name))
    if s.max_properties is not None and len(value) > s.max_properties:
        errs.too_many(path, len(value), s.max_properties)
    if s.min_properties is not None and len(value) < s.min_properties:
        errs.invalid(path, value, f"{shown} in body should have at least {s.min_properties} properties")
    extra = s.additional_properties if isinstance(s.additional_properties, Schema) else None
    for name in sorted(value):
        sub = s.properties.get(name)
        if sub is None:
            sub = extra
        if sub is not None:
            validate_value(value[name], sub, child(path, name), errs)


def _combinators(value: Any, s: Schema, path: str, shown: str, errs: Errs) -> None:
    def ok(sub: Schema) -> bool:
        probe = Errs(errs.kind, errs.namespace, errs.name)
        validate_value(value, sub, path, probe)
        return not probe.items

    if s.all_of and not all(ok(sub) for sub in s.all_of):
        errs.invalid(path, value, f"{shown} in body must validate all the schemas (allOf)")
    if s.any_of and not any(ok(sub) for sub in s.any_of):
        errs.invalid(path, value, f"{shown} in body must validate at least one schema (anyOf)")
    if s.one_of and sum(ok(sub) for sub in s.one_of) != 1:
        errs.invalid(path, value, f"{shown} in body must validate one and only one schema (oneOf)")
    if s.not_ is not None and ok(s.not_):
        errs.invalid(path, value, f"{shown} in body must not validate the schema (not)")
