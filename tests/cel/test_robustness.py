"""Arbitrary input never escapes as a Python exception: only CelCompileError / CelRuntimeError."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.dra.cel import (
    CelCompileError,
    CelRuntimeError,
    Version,
    compile_any,
    compile_expression,
    prepare_device,
)

DEVICE = prepare_device(
    "d.example.com",
    {"s": "x", "i": 3, "b": True, "v": Version("1.2.3"), "l": [1, 2], "other.com/x": "y"},
    {},
)
TOKENS = [
    "device",
    ".",
    "attributes",
    "capacity",
    "driver",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    ",",
    ":",
    "?",
    "!",
    "-",
    "+",
    "*",
    "/",
    "%",
    "==",
    "!=",
    "<",
    ">=",
    "&&",
    "||",
    " in ",
    "'d.example.com'",
    "'s'",
    "s",
    "i",
    "v",
    "l",
    "1",
    "0",
    "2.5",
    "1u",
    "true",
    "null",
    "'a'",
    "b'x'",
    "has",
    "all",
    "exists",
    "map",
    "filter",
    "x",
    "size",
    "quantity",
    "semver",
    "'1Gi'",
    "'1.0.0'",
    "compareTo",
    "isGreaterThan",
    "cel",
    "bind",
    "optional",
    "of",
    "none",
    "orValue",
    ".?",
    "[?",
    "lowerAscii",
    "matches",
    "'^a'",
    "split",
    "int",
    "string",
    "dyn",
    "type",
    "includes",
    "exists_one",
    "sortBy",
    "transformList",
]


def _check(text: str) -> None:
    try:
        program = compile_any(text)
    except CelCompileError as exc:
        assert exc.expression == text
        return
    try:
        program.evaluate_value(DEVICE)
    except CelRuntimeError as exc:
        assert exc.expression == text


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_random_text(text: str) -> None:
    _check(text)


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=25).map(" ".join))
def test_random_token_soup(text: str) -> None:
    _check(text)


# -- well-typed expressions: every one compiles, so the evaluator sees all of them ----------------
# Random text rarely gets past the parser and checker. These expressions are built by type
# (bool, int, string, list of int) from the device's attributes, literals near the int64 edges,
# arithmetic, string and list functions, macros and semver/quantity comparisons, so they compile
# by construction and the evaluation itself is what is exercised: it either answers or raises
# CelRuntimeError (overflow, division by zero, index out of range, bad conversions, ...).

ATTRS = 'device.attributes["d.example.com"]'
INT_LITERALS = [
    *("0", "1", "-1", "2", "3", "7"),
    *("-9223372036854775808", "9223372036854775807", "4611686018427387904"),
]
STRING_LITERALS = ["''", "'a'", "'x'", "'abc'", "'1'", "'-5'", "'A,b,c'", "'ü'", "'9223372036854775808'"]
REGEXES = ["'^a'", "'b$'", "'[a-c]+'", "'x|y'", "'.*'"]


def _binary(op: str, a: st.SearchStrategy[str], b: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(a, b).map(lambda ab: f"({ab[0]} {op} {ab[1]})")


def _ternary(c: st.SearchStrategy[str], a: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(c, a, a).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})")


def _typed() -> tuple[st.SearchStrategy[str], st.SearchStrategy[str]]:
    """(bool expressions, int expressions), mutually recursive with strings and int lists."""
    x_bool = st.sampled_from(["x > 1", "x % 2 == 0", "x + 1 < 3", "x == 2", "x != 0"])
    x_int = st.sampled_from(["x", "x * 2", "x - 1", "x / 1", "x % 3"])

    def extend_int(ints: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            *(_binary(op, ints, ints) for op in ("+", "-", "*", "/", "%")),
            _ternary(bools, ints),
            strings.map(lambda s: f"{s}.size()"),
            lists.map(lambda li: f"{li}.size()"),
            st.tuples(lists, ints).map(lambda t: f"{t[0]}[{t[1]}]"),
            strings.map(lambda s: f"int({s})"),
            lists.map(lambda li: f"{li}.sum()"),
            lists.map(lambda li: f"{li}.min()"),
        )

    base_ints = st.one_of(st.sampled_from(INT_LITERALS), st.just(f"{ATTRS}.i"))
    ints = st.deferred(lambda: st.recursive(base_ints, extend_int, max_leaves=6))
    base_strings = st.one_of(
        st.sampled_from(STRING_LITERALS), st.just("device.driver"), st.just(f"{ATTRS}.s")
    )
    strings = st.deferred(
        lambda: st.one_of(
            base_strings,
            _binary("+", base_strings, base_strings),
            ints.map(lambda i: f"string({i})"),
            base_strings.map(lambda s: f"{s}.lowerAscii()"),
            st.tuples(base_strings, base_strings).map(lambda t: f"{t[0]}.split({t[1]})[0]"),
            _ternary(bools, base_strings),
        )
    )
    lists = st.deferred(
        lambda: st.one_of(
            st.just(f"{ATTRS}.l"),
            st.lists(base_ints, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
            st.just(f"{ATTRS}.l").map(lambda li: f"{li}.map(x, x * 2)"),
            x_bool.map(lambda b: f"{ATTRS}.l.filter(x, {b})"),
            x_int.map(lambda e: f"[1, 2, 3].map(x, {e})"),
        )
    )

    def extend_bool(bs: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            _binary("&&", bs, bs),
            _binary("||", bs, bs),
            bs.map(lambda b: f"!({b})"),
            _ternary(bs, bs),
        )

    base_bools = st.one_of(
        st.sampled_from(["true", "false", f"{ATTRS}.b", f"has({ATTRS}.s)", f"has({ATTRS}.missing)"]),
        *(_binary(op, ints, ints) for op in ("<", "<=", "==", "!=", ">")),
        _binary("==", strings, strings),
        _binary("<", strings, strings),
        st.tuples(strings, strings).map(lambda t: f"{t[0]}.startsWith({t[1]})"),
        st.tuples(strings, strings).map(lambda t: f"{t[0]}.contains({t[1]})"),
        st.tuples(strings, st.sampled_from(REGEXES)).map(lambda t: f"{t[0]}.matches({t[1]})"),
        st.tuples(ints, lists).map(lambda t: f"({t[0]} in {t[1]})"),
        st.tuples(lists, ints).map(lambda t: f"{t[0]}.includes({t[1]})"),
        x_bool.map(lambda b: f"{ATTRS}.l.exists(x, {b})"),
        x_bool.map(lambda b: f"{ATTRS}.l.all(x, {b})"),
        x_bool.map(lambda b: f"[1, 2, 3, 4].exists_one(x, {b})"),
        st.sampled_from(["'0.1.0'", "'1.2.3'", "'2.0.0-rc.1'"]).map(
            lambda v: f"{ATTRS}.v.isGreaterThan(semver({v}))"
        ),
        st.sampled_from(["'1'", "'1Gi'", "'500m'", "'1e3'"]).map(
            lambda q: f"quantity({q}).isLessThan(quantity('1Ki'))"
        ),
        lists.map(lambda li: f"{li}.isSorted()"),
    )
    bools = st.deferred(lambda: st.recursive(base_bools, extend_bool, max_leaves=6))
    return bools, ints


BOOL_EXPRESSIONS, INT_EXPRESSIONS = _typed()


def _evaluate(text: str, *, selector: bool) -> None:
    try:
        program = compile_expression(text) if selector else compile_any(text)
    except CelCompileError as exc:  # pragma: no cover - the generator builds well-typed input
        raise AssertionError(f"a well-typed expression did not compile: {text}\n{exc}") from exc
    try:
        value = program.evaluate(DEVICE) if selector else program.evaluate_value(DEVICE)
    except CelRuntimeError as exc:
        assert exc.expression == text
        return
    assert isinstance(value, bool) if selector else isinstance(value, int), (text, value)


@settings(max_examples=800, deadline=None)
@given(BOOL_EXPRESSIONS)
def test_well_typed_selectors_reach_the_evaluator(text: str) -> None:
    _evaluate(text, selector=True)


@settings(max_examples=400, deadline=None)
@given(INT_EXPRESSIONS)
def test_well_typed_int_expressions_reach_the_evaluator(text: str) -> None:
    _evaluate(text, selector=False)
