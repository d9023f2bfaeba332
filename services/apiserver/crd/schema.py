"""A CRD's ``openAPIV3Schema`` read into a tree of :class:`Schema` nodes, and whether it is
structural (what apiextensions-apiserver requires of an ``apiextensions.k8s.io/v1`` CRD).

Pure: dicts in, nodes and ``(path, message)`` problems out. The node keeps exactly what
validation, pruning, defaulting and the CEL rules read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from draflow.services.dra.cel.regex import Regex, RegexError, compile_regex

__all__ = ["Rule", "Schema", "SchemaError", "parse_schema", "structural_problems"]

TYPES = ("object", "array", "string", "integer", "number", "boolean")
_NO_DEFAULT = object()

# the JSONSchemaProps fields apiextensions.k8s.io/v1 knows (anything else is an unknown field)
_KNOWN = frozenset(
    {
        "id", "$schema", "$ref", "description", "type", "format", "title", "default", "maximum",
        "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern",
        "maxItems", "minItems", "uniqueItems", "multipleOf", "enum", "maxProperties",
        "minProperties", "required", "items", "allOf", "oneOf", "anyOf", "not", "properties",
        "additionalProperties", "patternProperties", "dependencies", "additionalItems",
        "definitions", "externalDocs", "example", "nullable", "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys",
        "x-kubernetes-list-type", "x-kubernetes-map-type", "x-kubernetes-validations",
    }
)  # fmt: skip
_FORBIDDEN_IN_V1 = (
    "$ref",
    "additionalItems",
    "patternProperties",
    "dependencies",
    "definitions",
    "id",
    "$schema",
)


class SchemaError(ValueError):
    """The schema dict cannot be read at all (a wrong type where a schema or list is needed)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class Rule:
    """One ``x-kubernetes-validations`` entry."""

    rule: str
    message: str = ""
    message_expression: str = ""
    reason: str = ""
    field_path: str = ""
    optional_old_self: bool = False


@dataclass
class Schema:
    type: str = ""
    format: str = ""
    nullable: bool = False
    properties: dict[str, Schema] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    additional_properties: Schema | bool | None = None
    items: Schema | None = None
    enum: list[Any] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    multiple_of: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str = ""
    compiled_pattern: Regex | None = None  # RE2, Go's syntax (linear time)
    min_items: int | None = None
    max_items: int | None = None
    unique_items: bool = False
    min_properties: int | None = None
    max_properties: int | None = None
    default: Any = _NO_DEFAULT
    preserve_unknown: bool = False
    int_or_string: bool = False
    embedded_resource: bool = False
    list_type: str = ""
    list_map_keys: tuple[str, ...] = ()
    map_type: str = ""
    rules: tuple[Rule, ...] = ()
    all_of: tuple[Schema, ...] = ()
    any_of: tuple[Schema, ...] = ()
    one_of: tuple[Schema, ...] = ()
    not_: Schema | None = None

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    def type_name(self) -> str:
        """The schema's type as upstream's CEL errors show it (``object``, ``string``...)."""
        return self.type or ("integer,string" if self.int_or_string else "")


def _num(raw: dict[str, Any], key: str, path: str) -> float | None:
    v = raw.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise SchemaError(f"{path}.{key}", "must be a number")
    return v


def _int(raw: dict[str, Any], key: str, path: str) -> int | None:
    v = raw.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise SchemaError(f"{path}.{key}", "must be an integer")
    return v


def _rules(raw: Any, path: str) -> tuple[Rule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SchemaError(path, "must be a list")
    out = []
    for i, r in enumerate(raw):
        if not isinstance(r, dict) or not isinstance(r.get("rule", ""), str):
            raise SchemaError(f"{path}[{i}]", "must be an object with a rule")
        out.append(
            Rule(
                rule=r.get("rule", ""),
                message=str(r.get("message", "") or ""),
                message_expression=str(r.get("messageExpression", "") or ""),
                reason=str(r.get("reason", "") or ""),
                field_path=str(r.get("fieldPath", "") or ""),
                optional_old_self=bool(r.get("optionalOldSelf", False)),
            )
        )
    return tuple(out)


def parse_schema(raw: Any, path: str = "openAPIV3Schema") -> Schema:
    """The node tree of a schema dict; raises SchemaError where a part is not even readable."""
    if not isinstance(raw, dict):
        raise SchemaError(path, "must be an object")
    unknown = sorted(k for k in raw if k not in _KNOWN)
    if unknown:
        raise SchemaError(f"{path}.{unknown[0]}", "unknown field")
    s = Schema()
    s.type = raw.get("type", "") or ""
    if not isinstance(s.type, str):
        raise SchemaError(f"{path}.type", "must be a string")
    s.format = str(raw.get("format", "") or "")
    s.nullable = bool(raw.get("nullable", False))
    props = raw.get("properties") or {}
    if not isinstance(props, dict):
        raise SchemaError(f"{path}.properties", "must be an object")
    s.properties = {k: parse_schema(v, f"{path}.properties[{k}]") for k, v in props.items()}
    req = raw.get("required") or []
    if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
        raise SchemaError(f"{path}.required", "must be a list of strings")
    s.required = tuple(req)
    ap = raw.get("additionalProperties")
    if isinstance(ap, bool):
        s.additional_properties = ap
    elif ap is not None:
        s.additional_properties = parse_schema(ap, f"{path}.additionalProperties")
    if raw.get("items") is not None:
        s.items = parse_schema(raw["items"], f"{path}.items")
    if raw.get("enum") is not None:
        if not isinstance(raw["enum"], list):
            raise SchemaError(f"{path}.enum", "must be a list")
        s.enum = list(raw["enum"])
    s.minimum, s.maximum = _num(raw, "minimum", path), _num(raw, "maximum", path)
    s.exclusive_minimum = bool(raw.get("exclusiveMinimum", False))
    s.exclusive_maximum = bool(raw.get("exclusiveMaximum", False))
    s.multiple_of = _num(raw, "multipleOf", path)
    s.min_length, s.max_length = _int(raw, "minLength", path), _int(raw, "maxLength", path)
    s.min_items, s.max_items = _int(raw, "minItems", path), _int(raw, "maxItems", path)
    s.min_properties, s.max_properties = _int(raw, "minProperties", path), _int(raw, "maxProperties", path)
    s.unique_items = bool(raw.get("uniqueItems", False))
    s.pattern = str(raw.get("pattern", "") or "")
    if s.pattern:
        try:
            s.compiled_pattern = compile_regex(s.pattern)
        except RegexError as exc:
            raise SchemaError(f"{path}.pattern", f"must be a valid regular expression: {exc}") from None
    if "default" in raw:
        s.default = raw["default"]
    s.preserve_unknown = bool(raw.get("x-kubernetes-preserve-unknown-fields", False))
    s.int_or_string = bool(raw.get("x-kubernetes-int-or-string", False))
    s.embedded_resource = bool(raw.get("x-kubernetes-embedded-resource", False))
    s.list_type = str(raw.get("x-kubernetes-list-type", "") or "")
    s.list_map_keys = tuple(raw.get("x-kubernetes-list-map-keys") or ())
    s.map_type = str(raw.get("x-kubernetes-map-type", "") or "")
    s.rules = _rules(raw.get("x-kubernetes-validations"), f"{path}.x-kubernetes-validations")
    for key, attr in (("allOf", "all_of"), ("anyOf", "any_of"), ("oneOf", "one_of")):
        items = raw.get(key)
        if items is not None:
            if not isinstance(items, list):
                raise SchemaError(f"{path}.{key}", "must be a list")
            setattr(s, attr, tuple(parse_schema(x, f"{path}.{key}[{i}]") for i, x in enumerate(items)))
    if raw.get("not") is not None:
        s.not_ = parse_schema(raw["not"], f"{path}.not")
    return s


def _value_validation_problems(
    raw: dict[str, Any], path: str, int_or_string: bool = False
) -> list[tuple[str, str]]:
    """Inside allOf/anyOf/oneOf/not only value validations may appear (no types, defaults...);
    ``anyOf: [{type: integer}, {type: string}]`` under ``x-kubernetes-int-or-string`` is the
    one exception."""
    out: list[tuple[str, str]] = []
    for key in (
        "type",
        "default",
        "nullable",
        "additionalProperties",
        "x-kubernetes-preserve-unknown-fields",
    ):
        if key in raw and not (key == "type" and int_or_string and raw["type"] in ("integer", "string")):
            out.append((f"{path}.{key}", "Forbidden: must be empty to be structural"))
    for name, sub in (raw.get("properties") or {}).items():
        if isinstance(sub, dict):
            out += _value_validation_problems(sub, f"{path}.properties[{name}]")
    if isinstance(raw.get("items"), dict):
        out += _value_validation_problems(raw["items"], f"{path}.items")
    return out


def structural_problems(
    raw: dict[str, Any], path: str = "openAPIV3Schema", root: bool = True
) -> list[tuple[str, str]]:
    """Where a schema is not structural, as (path, rule) in upstream's words: every node has a
    type (or ``x-kubernetes-int-or-string`` / ``x-kubernetes-preserve-unknown-fields``), an
    object has properties or additionalProperties but not both, the root is an object, v1 CRDs
    use no ``$ref``/``patternProperties``..."""
    out: list[tuple[str, str]] = []
    for key in _FORBIDDEN_IN_V1:
        if key in raw:
            out.append((f"{path}.{key}", "Forbidden: must not be set"))
    typ = raw.get("type", "")
    if typ and typ not in TYPES:
        shown = ", ".join(f'"{t}"' for t in TYPES)
        out.append((f"{path}.type", f'Unsupported value: "{typ}": supported values: {shown}'))
    if root and typ != "object":
        out.append((f"{path}.type", 'Invalid value: "' + str(typ) + '": must be object at the root'))
    if raw.get("x-kubernetes-int-or-string") and typ:
        out.append((f"{path}.type", "Forbidden: must be empty if x-kubernetes-int-or-string is true"))
    elif (
        not typ
        and not raw.get("x-kubernetes-int-or-string")
        and not raw.get("x-kubernetes-preserve-unknown-fields")
    ):
        out.append((f"{path}.type", "Required value: must not be empty for specified object fields"))
    if raw.get("properties") and raw.get("additionalProperties") not in (None, False):
        out.append(
            (
                f"{path}.additionalProperties",
                "Forbidden: additionalProperties and properties are mutual exclusive",
            )
        )
    if typ == "array" and raw.get("items") is None:
        out.append((f"{path}.items", "Required value: must be specified"))
    for name, sub in (raw.get("properties") or {}).items():
        if isinstance(sub, dict):
            out += structural_problems(sub, f"{path}.properties[{name}]", False)
    for key in ("items", "additionalProperties"):
        if isinstance(raw.get(key), dict):
            out += structural_problems(raw[key], f"{path}.{key}", False)
    for key in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(raw.get(key) or []):
            if isinstance(sub, dict):
                out += _value_validation_problems(
                    sub, f"{path}.{key}[{i}]", bool(raw.get("x-kubernetes-int-or-string"))
                )
    if isinstance(raw.get("not"), dict):
        out += _value_validation_problems(raw["not"], f"{path}.not")
    return out
