"""KEP-4381 ``Parameters.Selector``: a metav1.LabelSelector matched against the labels of a
``Capacity``'s ObjectMeta, and the rules that make one malformed.

The KEP makes ``Selector`` a value, not a pointer, so a parameters object without one selects every
capacity, as does an empty selector. The matching is the apimachinery label selector's: matchLabels
and matchExpressions ANDed; ``NotIn`` and ``DoesNotExist`` hold for a label that is absent.
"""

from __future__ import annotations

import pytest

from draflow.events.api.meta import LabelSelector, LabelSelectorRequirement
from draflow.services.dra.numeric.labels import selector_error, selector_matches

pytestmark = pytest.mark.kep4381

LABELS = {"vendor": "acme", "model": "frob-2"}


def _expr(key: str, operator: str, *values: str) -> LabelSelector:
    return LabelSelector(
        match_expressions=(LabelSelectorRequirement(key=key, operator=operator, values=values),)
    )


# -- matching -------------------------------------------------------------------------------------


def test_no_selector_and_an_empty_selector_select_every_capacity() -> None:
    for sel in (None, LabelSelector()):
        assert selector_matches(sel, LABELS)
        assert selector_matches(sel, {})


@pytest.mark.parametrize(
    ("match_labels", "matches"),
    [
        ({"vendor": "acme"}, True),
        ({"vendor": "acme", "model": "frob-2"}, True),
        ({"vendor": "other"}, False),
        ({"vendor": "acme", "model": "frob-1"}, False),
        ({"zone": "a"}, False),  # absent label
        ({"vendor": ""}, False),  # an empty value is not an absent label
    ],
)
def test_match_labels_need_every_pair(match_labels: dict[str, str], matches: bool) -> None:
    assert selector_matches(LabelSelector(match_labels=match_labels), LABELS) is matches


@pytest.mark.parametrize(
    ("sel", "matches"),
    [
        (_expr("vendor", "In", "acme", "other"), True),
        (_expr("vendor", "In", "other"), False),
        (_expr("zone", "In", "a"), False),
        (_expr("vendor", "NotIn", "other"), True),
        (_expr("vendor", "NotIn", "acme"), False),
        (_expr("zone", "NotIn", "a"), True),
        (_expr("vendor", "Exists"), True),
        (_expr("zone", "Exists"), False),
        (_expr("zone", "DoesNotExist"), True),
        (_expr("vendor", "DoesNotExist"), False),
    ],
    ids=lambda v: v if isinstance(v, bool) else repr(v.match_expressions[0]),
)
def test_match_expression_operators(sel: LabelSelector, matches: bool) -> None:
    assert selector_matches(sel, LABELS) is matches


def test_match_labels_and_expressions_are_anded() -> None:
    sel = LabelSelector(
        match_labels={"vendor": "acme"},
        match_expressions=(
            LabelSelectorRequirement(key="model", operator="In", values=("frob-1", "frob-2")),
            LabelSelectorRequirement(key="broken", operator="DoesNotExist"),
        ),
    )
    assert selector_matches(sel, LABELS)
    assert not selector_matches(sel, {**LABELS, "broken": "true"})
    assert not selector_matches(sel, {**LABELS, "vendor": "other"})
    assert not selector_matches(sel, {**LABELS, "model": "frob-3"})


# -- malformed selectors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sel",
    [
        None,
        LabelSelector(),
        LabelSelector(match_labels={"vendor": "acme"}),
        _expr("vendor", "In", "acme"),
        _expr("vendor", "NotIn", "acme", "other"),
        _expr("vendor", "Exists"),
        _expr("vendor", "DoesNotExist"),
    ],
)
def test_well_formed_selectors_have_no_error(sel: LabelSelector | None) -> None:
    assert selector_error(sel) is None


@pytest.mark.parametrize(
    ("sel", "error"),
    [
        (_expr("gen", "Gt", "3"), "selector.matchExpressions[0].operator: unsupported operator 'Gt'"),
        (_expr("vendor", "in", "acme"), "selector.matchExpressions[0].operator: unsupported operator 'in'"),
        (_expr("vendor", "In"), "selector.matchExpressions[0].values: must be non-empty for In"),
        (_expr("vendor", "NotIn"), "selector.matchExpressions[0].values: must be non-empty for NotIn"),
        (_expr("vendor", "Exists", "acme"), "selector.matchExpressions[0].values: must be empty for Exists"),
        (
            _expr("vendor", "DoesNotExist", "acme"),
            "selector.matchExpressions[0].values: must be empty for DoesNotExist",
        ),
    ],
)
def test_malformed_requirements_name_field_path_and_rule(sel: LabelSelector, error: str) -> None:
    assert selector_error(sel) == error


def test_the_error_names_the_first_bad_requirement_by_index() -> None:
    sel = LabelSelector(
        match_expressions=(
            LabelSelectorRequirement(key="vendor", operator="Exists"),
            LabelSelectorRequirement(key="model", operator="In"),
            LabelSelectorRequirement(key="zone", operator="Nope"),
        )
    )
    assert selector_error(sel) == "selector.matchExpressions[1].values: must be non-empty for In"
