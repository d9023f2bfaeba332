"""Decode one manifest (a dict from YAML/JSON) into its v1 Struct, and encode it back.

``decode_object`` is the single entry point every component uses: it looks the (apiVersion,
kind) up in the registry, decodes strictly with msgspec into the wire version's Struct, converts
older versions to the served storage version and turns msgspec's errors into Kubernetes-style
``FieldError``s (``strict decoding error: unknown field "spec.foo"``).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import msgspec

from draflow.events.api.apiextensions_v1 import CustomObject
from draflow.events.api.base import ApiStruct
from draflow.events.api.errors import DECODE, REQUIRED, UNKNOWN_FIELD, ApiError, FieldError
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.registry import lookup_wire

__all__ = ["decode_object", "encode_object", "identity", "object_meta", "strip_nulls", "to_json"]

_TAIL = re.compile(r"^(?P<msg>.*) - at `(?P<path>[^`]*)`(?: in `(?P<parent>[^`]*)`)?$", re.S)
_FIELD_TAIL = re.compile(r"^(?P<msg>.*) - at field `(?P<field>[^`]*)`$", re.S)
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_JSON_TYPES = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "null": type(None),
    "array": list,
    "object": dict,
}
_TYPE_WORDS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "null": "null"}
_BOUND = re.compile(r"Expected `(\w+)`(?: of length)? (<=|>=|<|>) (\S+)$")
_BOUND_WORDS = {
    "<=": "less than or equal to",
    ">=": "greater than or equal to",
    "<": "less than",
    ">": "greater than",
}


def strip_nulls(value: Any) -> Any:
    """Drop ``key: null`` entries everywhere: Go's decoder treats them as "not set"."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


def identity(manifest: Any) -> tuple[str, str, str]:
    """(kind, namespace, name) of a raw manifest, best effort, for error messages."""
    if not isinstance(manifest, dict):
        return "", "", ""
    meta = manifest.get("metadata")
    kind = manifest.get("kind")
    kind = kind if isinstance(kind, str) else ""
    if not isinstance(meta, dict):
        return kind, "", ""
    ns, name = meta.get("namespace"), meta.get("name") or meta.get("generateName")
    return kind, ns if isinstance(ns, str) else "", name if isinstance(name, str) else ""


def _segments(path: str) -> list[str | int | None]:
    """``$.a[0].b[...]`` -> ["a", 0, "b", None] (None = a map key msgspec did not name)."""
    out: list[str | int | None] = []
    for field, index in _SEGMENT.findall(path[1:] if path.startswith("$") else path):
        if field:
            out.append(field)
        elif index == "...":
            out.append(None)
        else:
            out.append(int(index))
    return out


def _resolve(raw: Any, segs: list[str | int | None], wanted: Any) -> list[str | int] | None:
    """Fill in unnamed map keys: the first key whose subtree satisfies ``wanted(target)``."""
    if not segs:
        return [] if wanted(raw) else None
    head, rest = segs[0], segs[1:]
    if head is None:
        if not isinstance(raw, dict):
            return None
        for key, sub in raw.items():
            found = _resolve(sub, rest, wanted)
            if found is not None:
                return [str(key), *found]
        return None
    if isinstance(head, int):
        if not isinstance(raw, list) or head >= len(raw):
            return None
    elif not isinstance(raw, dict) or head not in raw:
        return None
    found = _resolve(raw[head], rest, wanted)
    return None if found is None else [head, *found]


def _render(segs: list[str | int | None], keyed: set[int]) -> str:
    out = ""
    for i, seg in enumerate(segs):
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif seg is None:
            out += "[*]"
        elif i in keyed:
            out += f"[{seg}]"
        else:
            out += f".{seg}" if out else seg
    return out


def translate(exc: msgspec.ValidationError, raw: Any, kind: str, namespace: str, name: str) -> FieldError:
    """msgspec's ``Expected `str`, got `int` - at `$.metadata.name``` -> a Kubernetes-style error."""
    text = str(exc)
    m = _TAIL.match(text)
    msg, path, parent = (m["msg"], m["path"], m["parent"]) if m else (text, "$", None)
    field_m = _FIELD_TAIL.match(msg)
    sub_field = None
    if field_m:
        msg, sub_field = field_m["msg"], field_m["field"]
    if parent is not None:  # error in a map key: "at `key` in `$.x`"
        path, msg = parent, f"invalid map key: {msg}"
    segs = _segments(path)
    unknown = re.match(r"Object contains unknown field `(.*)`$", msg, re.S)
    expected = re.match(r"Expected `(.+?)`, got `(\w+)`$", msg, re.S)

    def wanted(target: Any) -> bool:
        if unknown:
            return isinstance(target, dict) and unknown[1] in target
        if expected and expected[2] in _JSON_TYPES:
            want = _JSON_TYPES[expected[2]]
            return type(target) is want
        if sub_field:
            return isinstance(target, dict) and sub_field.split("[")[0] in target
        return True

    keyed = {i for i, s in enumerate(segs) if s is None}
    resolved: list[str | int | None] | None = None
    if keyed:
        found = _resolve(raw, segs, wanted)
        resolved = list(found) if found is not None else None
    shown = _render(resolved if resolved is not None else segs, keyed)
    if unknown:
        full = f"{shown}.{unknown[1]}" if shown else unknown[1]
        return FieldError(
            kind=kind, namespace=namespace, name=name, path=full, type=UNKNOWN_FIELD, rule=_hint(unknown[1])
        )
    if sub_field:
        shown = f"{shown}.{sub_field}" if shown else sub_field
    if expected:
        kinds = [t.strip() for t in expected[1].split("|") if t.strip() != "null"]
        want = " or ".join(_TYPE_WORDS.get(t, t) for t in kinds)
        msg = f"expected {want}, got {_TYPE_WORDS.get(expected[2], expected[2])}"
    elif bound := _BOUND.match(msg):
        msg = f"Invalid value: must be {_BOUND_WORDS[bound[2]]} {bound[3]}"
    return FieldError(kind=kind, namespace=namespace, name=name, path=shown, type=DECODE, rule=msg)


def _missing(manifest: dict[str, Any], field: str) -> str:
    rule = f"Required value: {field} not set"
    for key in manifest:
        if isinstance(key, str) and key.lower() == field.lower() and key != field:
            return f'{rule} (found "{key}": field names are case-sensitive)'
    return rule


@lru_cache(maxsize=1)
def _known_fields() -> dict[str, str]:
    """lower-case -> wire spelling of every field of every API struct (for "did you mean")."""
    out: dict[str, str] = {}
    todo: list[type] = [ApiStruct]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        for wire in getattr(cls, "__struct_encode_fields__", ()):
            out.setdefault(wire.lower(), wire)
    return out


def _hint(field: str) -> str:
    known = _known_fields().get(field.lower())
    return f' (did you mean "{known}"? field names are case-sensitive)' if known and known != field else ""


def decode_object(manifest: Any, *, strip: bool = True) -> ApiStruct:
    """Decode one manifest dict into the storage-version Struct; raises ``ApiError``.

    Kinds or versions draflow does not serve are refused as kubectl does (``no matches for kind
    "X" in version "g/v"``). Older resource.k8s.io versions are converted to v1.
    """
    kind, namespace, name = identity(manifest)
    if not isinstance(manifest, dict):
        raise ApiError([FieldError(kind="", type=DECODE, rule="a manifest must be a mapping (object)")])
    api_version = manifest.get("apiVersion")
    if not isinstance(api_version, str) or not api_version:
        raise ApiError(
            [
                FieldError(
                    kind=kind,
                    namespace=namespace,
                    name=name,
                    path="apiVersion",
                    type=REQUIRED,
                    rule=_missing(manifest, "apiVersion"),
                )
            ]
        )
    if not kind:
        raise ApiError(
            [
                FieldError(
                    kind="",
                    namespace=namespace,
                    name=name,
                    path="kind",
                    type=REQUIRED,
                    rule=_missing(manifest, "kind"),
                )
            ]
        )
    wire = lookup_wire(api_version, kind)
    if wire is None:
        raise ApiError(
            [
                FieldError(
                    kind=kind,
                    namespace=namespace,
                    name=name,
                    type=DECODE,
                    rule=f'no matches for kind "{kind}" in version "{api_version}"',
                )
            ]
        )
    body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    if wire.struct is CustomObject:
        return _custom_object(api_version, kind, body, namespace, name)
    if strip:
        body = strip_nulls(body)
    try:
        obj = msgspec.convert(body, wire.struct)
    except msgspec.ValidationError as exc:
        raise ApiError([translate(exc, body, kind, namespace, name)]) from None
    return wire.to_storage(obj) if wire.to_storage is not None else obj


def _custom_object(
    api_version: str, kind: str, body: dict[str, Any], namespace: str, name: str
) -> CustomObject:
    """A custom object: metadata decoded strictly (as for every kind), the rest kept as written;
    the CRD's schema (the apiserver's admission) decides about it. Nulls in the content stay:
    ``nullable`` fields may hold them."""
    meta = body.get("metadata", {})
    try:
        metadata = msgspec.convert(strip_nulls(meta), ObjectMeta)
    except msgspec.ValidationError as exc:
        raise ApiError([translate(exc, {"metadata": meta}, kind, namespace, name)]) from None
    content = {k: v for k, v in body.items() if k != "metadata"}
    return CustomObject(api_version=api_version, kind=kind, metadata=metadata, content=content)


def object_meta(obj: ApiStruct) -> ObjectMeta:
    """The ``metadata`` of a top-level object (every served kind has one)."""
    meta = getattr(obj, "metadata", None)
    if not isinstance(meta, ObjectMeta):
        raise TypeError(f"{type(obj).__name__} is not a top-level API object")
    return meta


def encode_object(obj: ApiStruct) -> dict[str, Any]:
    """The manifest of a storage object: ``apiVersion`` and ``kind`` first, defaults omitted.

    Like the API server's output, unset optional fields are absent but an empty ``status`` of a
    kind that has one shows as ``status: {}``.
    """
    if isinstance(obj, CustomObject):
        return obj.manifest()
    body = msgspec.json.decode(msgspec.json.encode(obj))  # tuples -> lists, in C
    return {"apiVersion": obj.API_VERSION, "kind": obj.KIND, **body}


def to_json(obj: ApiStruct) -> bytes:
    """JSON of ``encode_object`` (what ``get -o json`` prints, compact)."""
    return msgspec.json.encode(encode_object(obj))
