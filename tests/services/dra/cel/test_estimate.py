"""The static cost estimate the API server checks at admission (cel-go's checker rules).

Hand-computed with cel-go's constants (identifier/selection 1, list literal 10, string work a tenth
of its size, a comprehension's condition and step times its range): the exact figures for simple
selectors; Kubernetes' own CEL-cost validation case (seven nested ``all()`` over ten elements) and
six levels refused; five levels (655,551) accepted.
"""

from __future__ import annotations

import pytest

from draflow.services.dra.cel import check_expression

TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"


def nested_all(depth: int, inner: str = "int('1'.find('[0-9]*')) < 100") -> str:
    expr = inner
    for var in reversed(["x", "y", "z", "z2", "z3", "z4", "z5"][:depth]):
        expr = f"{TEN}.all({var}, {expr})"
    return expr


@pytest.mark.parametrize(
    ("expression", "cost"),
    [
        # ident 1, select on the device 1, equality: a tenth of the shorter string (15 chars) = 2
        ("device.driver == 'gpu.example.com'", 4),
        # index 1 + select 1 (+ device 2), equality with a 16-char literal = 2
        ("device.attributes['gpu.example.com'].model == 'LATEST-GPU-MODEL'", 6),
        # matches: ceil((64+1)*0.1)=7 times ceil(10*0.25)=3, plus the text's 4
        ("device.attributes['gpu.example.com'].model.matches('^LATEST.*$')", 25),
        # a list literal 10; all(): result 1, per element condition 2 + step 1 + body (== : 1)
        ("[1, 2].all(x, x == 1)", 10 + 1 + 2 * (2 + 1 + 2)),
        # exists(): condition 3
        ("[1, 2].exists(x, x == 1)", 10 + 1 + 2 * (3 + 1 + 2)),
        # cel.bind: its empty range 10, then the value and the body
        ("cel.bind(n, 1, n == 1)", 10 + 0 + 2),
    ],
)
def test_estimates_follow_cel_go(expression: str, cost: int) -> None:
    assert check_expression(expression) == cost


def test_nested_loops_multiply() -> None:
    assert check_expression(nested_all(5)) < 1_000_000 < check_expression(nested_all(6))
    assert check_expression(nested_all(7)) > 60_000_000


def test_unbounded_sizes_saturate() -> None:
    """A string nothing bounds (a list's string element) costs cel-go's maximum in a regex."""
    assert check_expression("['a'].all(s, (s + s).matches('^a+$'))") < 1_000_000
    assert check_expression("dyn(['a']).all(s, string(s).matches('^a+$'))") >= 2**64 - 1
