"""Arbitrary input never escapes as a Python exception: only CelCompileError / CelRuntimeError."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.cel import CelCompileError, CelRuntimeError, Version, compile_any, prepare_device

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
