"""The static cost estimate, rule by rule (cel-go's checker/cost.go with Kubernetes' DRA sizes).

Every figure is computed by hand: identifiers and selections on maps/objects 1, literals 0, list
literals 10 and map literals 30, ``has()`` 1; string work a tenth of the sizes involved (rounded
up); ``in`` over a list its size; a comprehension's range, accumulator and result once plus
(condition + step) per element, with cel-go's macro expansions. Sizes the device contributes come
from the ResourceSlice API limits as upstream's size estimator declares them: driver names and
attribute domains 63 characters, at most 32 domains per device. test_estimate.py holds the
selectors of Kubernetes' own tests; these cover the remaining rules.
"""

from __future__ import annotations

import pytest

from draflow.services.dra.cel import COST_LIMIT, check_expression

pytestmark = pytest.mark.kep4381

UNBOUNDED = 2**64 - 1  # cel-go's saturated estimate


@pytest.mark.parametrize(
    ("expression", "cost"),
    [
        # equality: a tenth of the shorter side; bytes literals 21 and 26 long -> ceil(2.1)
        ("b'abcdefghijklmnopqrstu' == b'abcdefghijklmnopqrstuvwxyz'", 3),
        # a conditional's size is its larger branch (21, not 1); against 30 chars -> ceil(2.1)
        ("(true ? 'a' : 'abcdefghijklmnopqrstu') == 'abcdefghijklmnopqrstuvwxyz0123'", 3),
        # ||: both operands; driver (2) == 'a' (ceil(0.1) = 1), then the field (2)
        ("device.driver == 'a' || device.allowMultipleAllocations", 5),
        # integer arithmetic 1, integer equality ceil(0.1) = 1
        ("1 + 2 == 3", 2),
        # `in` a list: the list's size (3) plus the literal (10)
        ("1 in [1, 2, 3]", 13),
        # contains: ceil(63 * 0.1) = 7 times ceil(11 * 0.1) = 2, plus the driver (2)
        ("device.driver.contains('abcdefghijk')", 2 + 7 * 2),
        # startsWith/endsWith: a tenth of the argument (11 -> 2), plus the driver (2)
        ("device.driver.startsWith('abcdefghijk')", 4),
        ("device.driver.endsWith('abcdefghijk')", 4),
        # global matches(): ceil((63 + 1) * 0.1) = 7 times ceil(18 * 0.25) = 5, plus the driver
        ("matches(device.driver, '^abcdefghijklmnop$')", 2 + 7 * 5),
        # lowerAscii (Kubernetes' strings library): a tenth of the text (7), keeps its size (63);
        # equality against 30 chars -> 3
        ("device.driver.lowerAscii() == 'abcdefghijabcdefghijabcdefghij'", 2 + 7 + 3),
        # map literal 30, size() 1, equality 1
        ("{'a': 1, 'b': 2}.size() == 2", 32),
        # has(): 1 plus the operand (a map literal, 30)
        ("has({'a': 1}.a)", 31),
        # list concatenation 1 plus both lists (20); its size (3) drives the loop:
        # all() result 1 + 3 * (condition 2 + step 1 + body `x > 0` 2)
        ("([1] + [2, 3]).all(x, x > 0)", 21 + 1 + 3 * 5),
    ],
)
def test_call_and_literal_rules(expression: str, cost: int) -> None:
    assert check_expression(expression) == cost


@pytest.mark.parametrize(
    ("expression", "cost"),
    [
        # exists_one: result `accu == 1` 2, step `body ? accu + 1 : accu` body + 2
        ("[1, 2].exists_one(x, x == 1)", 10 + 2 + 2 * (2 + 2)),
        # filter: accumulator [] 10, step `body ? accu + [x] : accu` body + 13; then size, ==
        ("[1, 2].filter(x, x == 1).size() == 1", 10 + 10 + 1 + 2 * (2 + 13) + 2),
        # map: accumulator [] 10, step `accu + [f(x)]` 12 + f(x) (x + 1: 2)
        ("[1, 2].map(x, x + 1).size() == 2", 10 + 10 + 1 + 2 * (12 + 2) + 2),
        # map with a filter: step `pred ? accu + [f] : accu` = pred (2) + 12 + f (1)
        ("[1, 2].map(x, x > 1, x).size() == 1", 10 + 10 + 1 + 2 * (2 + 12 + 1) + 2),
        # two-variable all() over a list: the same loop as all(), body `i < v` 3
        ("[1, 2].all(i, v, i < v)", 10 + 1 + 2 * (2 + 1 + 3)),
        # over a map: one iteration per entry; `v == 1` 2
        ("{'a': 1}.all(k, v, v == 1)", 30 + 1 + 1 * (2 + 1 + 2)),
        # a map literal's keys have their literal sizes: `k.startsWith('a')` is 1 + 1
        ("{'abc': 1, 'd': 2}.all(k, k.startsWith('a'))", 30 + 1 + 2 * (2 + 1 + 2)),
        # transformList: step `accu + [t]` 12 + t; with a filter `pred ? ... : accu` adds pred
        ("[1, 2].transformList(i, v, v + 1).size() == 2", 10 + 10 + 1 + 2 * (12 + 2) + 2),
        ("[1, 2].transformList(i, v, i > 0, v + 1).size() == 1", 10 + 10 + 1 + 2 * (12 + 2 + 2) + 2),
    ],
)
def test_macro_expansions(expression: str, cost: int) -> None:
    assert check_expression(expression) == cost


@pytest.mark.parametrize("field", ["attributes", "capacity"])
def test_device_domains_bound_loops(field: str) -> None:
    """At most 32 domains, each name at most 63 characters (upstream's size estimator):
    `d.matches('^a')` is 1 + ceil(64 * 0.1) * ceil(2 * 0.25) = 8, exists() adds 3 + 1 per domain."""
    assert check_expression(f"device.{field}.exists(d, d.matches('^a'))") == 2 + 1 + 32 * (3 + 1 + 8)


def test_nested_loops_over_the_device_hit_the_limit_at_four_levels() -> None:
    """Comparing two domain names costs 2 + ceil(6.3) = 9; every level over the 32 domains adds
    `3 + 32 * (condition 2 + step 1 + inner)`: three levels fit under 1,000,000, four do not."""
    three = "device.attributes.all(a, device.attributes.all(b, device.attributes.all(c, a == b)))"
    four = f"device.attributes.all(z, {three})"
    inner = 9
    for _ in range(3):
        inner = 3 + 32 * (3 + inner)
    assert check_expression(three) == inner == 399_555
    assert check_expression(four) == 3 + 32 * (3 + inner) == 12_785_859
    assert check_expression(three) <= COST_LIMIT < check_expression(four)


def test_a_bound_string_of_unknown_size_saturates() -> None:
    """string(1) has no size bound in cel-go, so a regex over it is unaffordable however short."""
    assert check_expression("cel.bind(s, string(1), s.matches('^1$'))") == UNBOUNDED
    # the same regex over a literal bound to the name is cheap: its size is known
    assert check_expression("cel.bind(s, '1', s.matches('^1$'))") < 100
