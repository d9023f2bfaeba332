"""Compile-time type checker: resolves identifiers, functions and overloads, as cel-go's checker.

It rejects what upstream rejects at compile time (undeclared references, unknown functions and
fields, argument types no overload accepts, mixed-type list/map literals, invalid regex literals
- :meth:`Checker.validate_regexes`, run after the whole expression type-checked)
and records for every node its static type and for every call its candidate overloads, which the
compiler uses to pick direct implementations instead of dynamic dispatch.
"""

from __future__ import annotations

from typing import Final

from . import types as t
from .ast import Bind, Call, Comprehension, Has, Ident, Index, ListExpr, Literal, MapExpr, Node, Select
from .errors import CelCompileError
from .library import Overload
from .regex import RegexError, compile_regex
from .types import BOOL, DYN, INT, STRING, Type

__all__ = ["DEVICE_FIELDS", "Checker"]

DEVICE_FIELDS: Final = {
    "driver": STRING,
    "attributes": t.map_of(STRING, t.map_of(STRING, DYN)),
    "capacity": t.map_of(STRING, t.map_of(STRING, t.QUANTITY)),
    "allowMultipleAllocations": BOOL,
}
_LITERAL_TYPES: Final = {
    "int": t.INT,
    "uint": t.UINT,
    "double": t.DOUBLE,
    "string": t.STRING,
    "bytes": t.BYTES,
    "bool": t.BOOL,
    "null": t.NULL,
}
TYPE_NAMES: Final = frozenset(
    ("int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type", "optional_type")
)
_KEY_KINDS: Final = frozenset(("int", "uint", "bool", "string", "dyn"))
_PREDICATES: Final = frozenset(("all", "exists", "exists_one"))
_REGEX_FUNCTIONS: Final = frozenset(("matches", "find", "findAll"))


def _is_string_literal(node: Node) -> bool:
    return isinstance(node, Literal) and node.kind == "string"


class Checker:
    """Type-checks one AST; results are in ``types`` and ``calls`` keyed by ``id(node)``."""

    def __init__(self, text: str, functions: dict[str, list[Overload]]) -> None:
        self.text = text
        self.functions = functions
        self.types: dict[int, Type] = {}
        self.calls: dict[int, tuple[str, list[Overload]]] = {}
        self.regex_calls: list[tuple[str, Call, bool]] = []  # (function, call, member) to validate

    def error(self, node: Node, message: str) -> CelCompileError:
        return CelCompileError(self.text, message, node.offset)

    def check(self, node: Node, scope: dict[str, Type]) -> Type:
        result = self._check(node, scope)
        self.types[id(node)] = result
        return result

    def _check(self, node: Node, scope: dict[str, Type]) -> Type:
        if isinstance(node, Literal):
            return _LITERAL_TYPES[node.kind]
        if isinstance(node, Ident):
            return self.ident(node, scope)
        if isinstance(node, Select):
            qualified = self.qualified_function(node, scope)
            if qualified is not None:
                raise self.error(node, f"undeclared reference to '{qualified}' (in container '')")
            return self.select(node, self.check(node.operand, scope), node.field, node.optional)
        if isinstance(node, Has):
            operand = self.check(node.operand, scope)
            self.select(node, operand, node.field, False)
            return BOOL
        if isinstance(node, Index):
            return self.index(node, scope)
        if isinstance(node, Call):
            return self.call(node, scope)
        if isinstance(node, ListExpr):
            return self.list_expr(node, scope)
        if isinstance(node, MapExpr):
            return self.map_expr(node, scope)
        if isinstance(node, Comprehension):
            return self.comprehension(node, scope)
        if isinstance(node, Bind):
            init = self.check(node.init, scope)
            return self.check(node.body, {**scope, node.var: init})
        raise self.error(node, f"unsupported expression {type(node).__name__}")

    # -- identifiers and selection -------------------------------------------------------------
    def ident(self, node: Ident, scope: dict[str, Type]) -> Type:
        if node.name in scope:
            return scope[node.name]
        if node.name == "device":
            return t.DEVICE
        if node.name in TYPE_NAMES:
            return t.TYPE
        raise self.error(node, f"undeclared reference to '{node.name}' (in container '')")

    def qualified_function(self, node: Node, scope: dict[str, Type]) -> str | None:
        """``optional.none`` etc. written without a call is still an undeclared reference."""
        name = _qualified_name(node)
        if name is None or name.split(".")[0] in scope or name.split(".")[0] == "device":
            return None
        return name if name in self.functions else None

    def select(self, node: Node, operand: Type, field: str, optional: bool) -> Type:
        if operand.kind == "optional_type":
            inner = self.select(node, operand.params[0], field, False)
            return t.optional_of(inner)
        if operand == t.DEVICE:
            ftype = DEVICE_FIELDS.get(field)
            if ftype is None:
                raise self.error(node, f"undefined field '{field}'")
        elif operand.kind == "map":
            if operand.params[0].kind not in ("string", "dyn") and not operand.params[0].is_param:
                raise self.error(node, f"type '{operand}' does not support field selection")
            ftype = operand.params[1]
        elif operand.is_dyn or operand.is_param:
            ftype = DYN
        else:
            raise self.error(node, f"type '{operand}' does not support field selection")
        return t.optional_of(ftype) if optional else ftype

    def index(self, node: Index, scope: dict[str, Type]) -> Type:
        operand = self.check(node.operand, scope)
        index = self.check(node.index, scope)
        wrap = node.optional
        if operand.kind == "optional_type":
            operand = operand.params[0]
            wrap = True
        # cel-go declares index_list(list(A), int) and index_map(map(K, V), K)
        if operand.kind == "list":
            if not t.unify(INT, index, {}):
                raise self._no_overload(node, "_[_]", [operand, index], member=False)
            result = operand.params[0]
        elif operand.kind == "map":
            if not t.unify(operand.params[0], index, {}):
                raise self._no_overload(node, "_[_]", [operand, index], member=False)
            result = operand.params[1]
        elif operand.is_dyn or operand.is_param:
            result = DYN
        else:
            raise self._no_overload(node, "_[_]", [operand, index], member=False)
        return t.optional_of(result) if wrap else result

    # -- calls ---------------------------------------------------------------------------------
    def call(self, node: Call, scope: dict[str, Type]) -> Type:
        name = node.function
        if name in ("_&&_", "_||_"):
            for arg in node.args:
                self.expect_bool(arg, self.check(arg, scope), name)
            return BOOL
        if name == "_?_:_":
            self.expect_bool(node.args[0], self.check(node.args[0], scope), name)
            a = self.check(node.args[1], scope)
            b = self.check(node.args[2], scope)
            joined = t.join(a, b)
            if joined is None:
                raise self._no_overload(node, name, [BOOL, a, b], member=False)
            return joined
        target = node.target
        member = target is not None
        if target is not None:
            qualified = _qualified_name(target)
            if qualified is not None and not self._is_variable(qualified, scope):
                full = f"{qualified}.{name}"
                if full in self.functions:
                    name, target, member = full, None, False
        overloads = [o for o in self.functions.get(name, ()) if o.member == member]
        if not overloads:
            if name in self.functions and member:
                # e.g. "x.quantity()" - exists only as a global function
                raise self.error(node, f"undeclared reference to '{name}' (in container '')")
            raise self.error(node, f"undeclared reference to '{name}' (in container '')")
        arg_types = ([self.check(target, scope)] if target is not None else []) + [
            self.check(a, scope) for a in node.args
        ]
        matches: list[Overload] = []
        results: list[Type] = []
        for o in overloads:
            if len(o.params) != len(arg_types):
                continue
            subst: dict[str, Type] = {}
            if all(t.unify(f, a, subst) for f, a in zip(o.params, arg_types, strict=True)):
                matches.append(o)
                results.append(t.substitute(o.result, subst))
        if not matches:
            raise self._no_overload(node, name, arg_types, member)
        if name in _REGEX_FUNCTIONS and node.args:
            self.regex_calls.append((name, node, member))
        self.calls[id(node)] = (name, matches)
        result = results[0]
        for r in results[1:]:
            result = t.join(result, r) or DYN
        return result

    def _is_variable(self, qualified: str, scope: dict[str, Type]) -> bool:
        root = qualified.split(".")[0]
        return root in scope or root == "device"

    def validate_regexes(self) -> None:
        """Regex literals, checked after type checking as Kubernetes' cel-go does.

        First cel-go's ``ValidateRegexLiterals``: the first argument of every ``matches`` call
        (the pattern of ``s.matches(p)``, but the *text* of ``matches(s, p)`` - upstream's
        quirk) must compile when it is a literal: "invalid matches argument" at the literal. Then
        program planning compiles every literal pattern of ``matches``, ``find`` and ``findAll``
        (cel-go's regex optimizations); a failure there is "program instantiation failed: ..."
        (an internal error in Kubernetes' field error terms).
        """
        calls = sorted(self.regex_calls, key=lambda c: c[1].offset)
        for name, node, _member in calls:
            if name == "matches" and _is_string_literal(node.args[0]):
                try:
                    compile_regex(str(node.args[0].value))  # type: ignore[attr-defined]
                except RegexError:
                    raise self.error(node.args[0], "invalid matches argument") from None
        for _name, node, member in calls:
            pattern = node.args[0] if member else node.args[-1]
            if _is_string_literal(pattern):
                try:
                    compile_regex(str(pattern.value))  # type: ignore[attr-defined]
                except RegexError as exc:
                    raise CelCompileError(
                        self.text, f"program instantiation failed: {exc}", positional=False, internal=True
                    ) from None

    def expect_bool(self, node: Node, actual: Type, function: str) -> None:
        if actual.kind not in ("bool", "dyn") and not actual.is_param:
            raise self._no_overload(node, function, [actual], member=False)

    def _no_overload(self, node: Node, name: str, args: list[Type], member: bool) -> CelCompileError:
        shown = ", ".join(str(a) for a in (args[1:] if member else args))
        where = f"{args[0]}.({shown})" if member else f"({shown})"
        return self.error(node, f"found no matching overload for '{name}' applied to '{where}'")

    # -- aggregates ----------------------------------------------------------------------------
    def list_expr(self, node: ListExpr, scope: dict[str, Type]) -> Type:
        elem: Type | None = None
        for e, opt in zip(node.elements, node.optional, strict=True):
            et = self.check(e, scope)
            if opt:
                if et.kind == "optional_type":
                    et = et.params[0]
                elif not et.is_dyn:
                    raise self.error(e, f"expected type 'optional_type' but found '{et}'")
            elem = self._homogeneous(e, elem, et)
        return t.list_of(elem or DYN)

    def map_expr(self, node: MapExpr, scope: dict[str, Type]) -> Type:
        key: Type | None = None
        value: Type | None = None
        for k, v, opt in node.entries:
            kt = self.check(k, scope)
            if kt.kind not in _KEY_KINDS:
                raise self.error(k, f"unsupported map key type: {kt}")
            vt = self.check(v, scope)
            if opt:
                if vt.kind == "optional_type":
                    vt = vt.params[0]
                elif not vt.is_dyn:
                    raise self.error(v, f"expected type 'optional_type' but found '{vt}'")
            key = self._homogeneous(k, key, kt)
            value = self._homogeneous(v, value, vt)
        return t.map_of(key or DYN, value or DYN)

    def _homogeneous(self, node: Node, have: Type | None, new: Type) -> Type:
        # Kubernetes enables HomogeneousAggregateLiterals: all elements share one type.
        if have is None:
            return new
        joined = t.join(have, new)
        if joined is None or (joined.is_dyn and not (have.is_dyn or new.is_dyn)):
            raise self.error(node, f"expected type '{have}' but found '{new}'")
        return joined

    def comprehension(self, node: Comprehension, scope: dict[str, Type]) -> Type:
        target = self.check(node.target, scope)
        kind = node.kind
        if kind in ("optMap", "optFlatMap"):
            if target.kind != "optional_type" and not target.is_dyn:
                raise self._no_overload(node, kind, [target], member=False)
            inner = target.params[0] if target.params else DYN
            body = self.check(node.args[0], {**scope, node.var: inner})
            if kind == "optMap":
                return t.optional_of(body)
            if body.kind != "optional_type" and not body.is_dyn:
                raise self.error(node.args[0], f"expected type 'optional_type' but found '{body}'")
            return body if body.kind == "optional_type" else t.optional_of(DYN)
        if target.kind == "list":
            v1, v2 = (INT, target.params[0]) if node.var2 is not None else (target.params[0], DYN)
        elif target.kind == "map":
            v1, v2 = target.params[0], target.params[1]
        elif target.is_dyn or target.is_param:
            v1, v2 = DYN, DYN
        else:
            raise self.error(
                node.target,
                f"expression of type '{target}' cannot be range of a comprehension "
                "(must be list, map, or dynamic)",
            )
        inner_scope = {**scope, node.var: v1}
        if node.var2 is not None:
            inner_scope[node.var2] = v2
        bodies = [self.check(a, inner_scope) for a in node.args]
        if kind in _PREDICATES:
            self.expect_bool(node.args[0], bodies[0], kind)
            return BOOL
        if kind == "filter":
            self.expect_bool(node.args[0], bodies[0], kind)
            return t.list_of(v1)
        if kind == "map":
            return t.list_of(bodies[0])
        if kind in ("map_filter", "transformList_filter", "transformMap_filter", "transformMapEntry_filter"):
            self.expect_bool(node.args[0], bodies[0], kind)
        last = bodies[-1]
        if kind == "map_filter" or kind.startswith("transformList"):
            return t.list_of(last)
        if kind.startswith("transformMapEntry"):
            if last.kind != "map" and not last.is_dyn:
                raise self.error(node.args[-1], f"expected type 'map' but found '{last}'")
            return last if last.kind == "map" else t.map_of(DYN, DYN)
        if kind.startswith("transformMap"):
            return t.map_of(v1 if target.kind == "map" else INT, last)
        if kind == "sortBy":
            if target.kind not in ("list", "dyn"):
                raise self._no_overload(node, "sortBy", [target], member=False)
            return target if target.kind == "list" else t.list_of(DYN)
        raise self.error(node, f"unsupported macro {kind}")


def _qualified_name(node: Node) -> str | None:
    parts: list[str] = []
    while isinstance(node, Select) and not node.optional:
        parts.append(node.field)
        node = node.operand
    if not isinstance(node, Ident):
        return None
    parts.append(node.name)
    return ".".join(reversed(parts))
