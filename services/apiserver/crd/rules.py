"""``x-kubernetes-validations``: CEL rules of a CRD's schema, run by draflow's CEL engine.

Each rule sees ``self`` (the value of the node it sits on) and, on an update, ``oldSelf`` (the
stored value at the same place, matched through object fields, map keys and the keys of
``x-kubernetes-list-type: map`` lists). A rule that names ``oldSelf`` is a transition rule: it
runs only where an old value exists, unless ``optionalOldSelf`` makes ``oldSelf`` an optional.
A false rule is reported as upstream: ``<path>: Invalid value: "object": <message>`` (the
value shown is the node's type), ``failed rule: <rule>`` when no message is given, with
``reason`` choosing Forbidden / Required / Duplicate instead of Invalid and ``fieldPath`` naming
a field below the node.
"""

from __future__ import annotations

import re
from typing import Any

from draflow.events.api.errors import DUPLICATE, FORBIDDEN, REQUIRED
from draflow.services.apiserver.crd.schema import Rule, Schema
from draflow.services.apiserver.crd.values import child
from draflow.services.dra.cel import CelCompileError, CelError, compile_rule
from draflow.services.dra.cel.values import NONE, Optional
from draflow.services.dra.validation.errs import Errs

__all__ = ["MISSING", "check_rule", "evaluate_rules", "is_transition"]

_OLD = re.compile(r"\boldSelf\b")
_VARS = ("self", "oldSelf")
MISSING = object()


def is_transition(rule: Rule) -> bool:
    return bool(_OLD.search(rule.rule))


def check_rule(rule: Rule) -> str:
    """Why a rule cannot be compiled ("" when it can): for the CRD's own validation."""
    try:
        compile_rule(rule.rule, _VARS)
        if rule.message_expression:
            compile_rule(rule.message_expression, _VARS)
    except CelCompileError as exc:
        return str(exc)
    return ""


def evaluate_rules(value: Any, old: Any, schema: Schema, path: str, errs: Errs) -> None:
    """Run every rule of ``schema``'s tree on ``value`` (``old``: the stored value or MISSING)."""
    _walk(value, old, schema, path, errs)


def _walk(value: Any, old: Any, schema: Schema, path: str, errs: Errs) -> None:
    if value is None:
        return
    for rule in schema.rules:
        _run(rule, value, old, schema, path, errs)
    if isinstance(value, dict):
        old_map = old if isinstance(old, dict) else {}
        extra = schema.additional_properties if isinstance(schema.additional_properties, Schema) else None
        for name, item in value.items():
            sub = schema.properties.get(name) or extra
            if sub is not None:
                _walk(item, old_map.get(name, MISSING), sub, child(path, name), errs)
    elif isinstance(value, list) and schema.items is not None:
        olds = _old_items(value, old, schema)
        for i, item in enumerate(value):
            _walk(item, olds[i], schema.items, f"{path}[{i}]", errs)


def _old_items(value: list[Any], old: Any, schema: Schema) -> list[Any]:
    """The old element each new one is compared with: only list-type map lists correlate."""
    if schema.list_type != "map" or not isinstance(old, list) or not schema.list_map_keys:
        return [MISSING] * len(value)

    def key(item: Any) -> Any:
        return tuple(repr(item.get(k)) for k in schema.list_map_keys) if isinstance(item, dict) else None

    by_key = {key(o): o for o in old}
    return [by_key.get(key(v), MISSING) for v in value]


def _run(rule: Rule, value: Any, old: Any, schema: Schema, path: str, errs: Errs) -> None:
    transition = is_transition(rule)
    if transition and old is MISSING and not rule.optional_old_self:
        return
    if transition and rule.optional_old_self:
        old_value: Any = NONE if old is MISSING else Optional(old)
    else:
        old_value = None if old is MISSING else old
    activation = {"self": value, "oldSelf": old_value}
    where = child(path, rule.field_path.lstrip(".")) if rule.field_path else path
    type_name = schema.type_name() or "object"
    try:
        ok = compile_rule(rule.rule, _VARS).evaluate(activation)
    except CelCompileError as exc:
        errs.internal(where, f"rule compile error: {exc}")
        return
    except CelError as exc:
        errs.invalid(where, type_name, str(exc))
        return
    if ok is True:
        return
    if ok is not False:
        errs.invalid(where, type_name, f"rule result must be a boolean, got {ok!r}")
        return
    message = _message(rule, activation)
    if rule.reason == "FieldValueForbidden":
        errs.add(where, FORBIDDEN, f"{FORBIDDEN}: {message}")
    elif rule.reason == "FieldValueRequired":
        errs.add(where, REQUIRED, f"{REQUIRED}: {message}")
    elif rule.reason == "FieldValueDuplicate":
        errs.add(where, DUPLICATE, f'{DUPLICATE}: "{type_name}": {message}')
    else:
        errs.invalid(where, type_name, message)


def _message(rule: Rule, activation: dict[str, Any]) -> str:
    if rule.message_expression:
        try:
            text = compile_rule(rule.message_expression, _VARS).evaluate(activation)
        except CelError:
            text = None
        if isinstance(text, str) and text.strip():
            return text
    return rule.message or f"failed rule: {rule.rule}"
