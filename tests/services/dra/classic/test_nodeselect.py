"""KEP-3063 ``ResourceClaimStatus.AvailableOnNodes``: a core/v1 NodeSelector over a node's name and
labels.

The KEP: nil means the resource is available everywhere. core/v1 semantics (the scheduler's node
affinity): terms are ORed, the requirements of a term ANDed; an empty term list or a term without
requirements selects no node; ``NotIn``/``DoesNotExist`` hold for an absent label, ``Gt``/``Lt``
compare integers and fail for an absent or non-integer label; matchFields know ``metadata.name``.
"""

from __future__ import annotations

import pytest

from draflow.events.api.meta import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from draflow.services.dra.classic.nodeselect import node_names_selector, selector_matches

pytestmark = pytest.mark.kep3063

LABELS = {"zone": "a", "gen": "4"}


def _req(key: str, operator: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=values)


def _labels(*reqs: NodeSelectorRequirement) -> NodeSelector:
    return NodeSelector(node_selector_terms=(NodeSelectorTerm(match_expressions=reqs),))


def _fields(*reqs: NodeSelectorRequirement) -> NodeSelector:
    return NodeSelector(node_selector_terms=(NodeSelectorTerm(match_fields=reqs),))


def test_no_selector_means_available_on_every_node() -> None:
    assert selector_matches(None, "node-1", {})
    assert selector_matches(None, "node-2", LABELS)


def test_an_empty_term_list_selects_no_node() -> None:
    assert not selector_matches(NodeSelector(), "node-1", LABELS)


def test_a_term_without_requirements_selects_no_node_but_does_not_hide_the_others() -> None:
    empty = NodeSelectorTerm()
    assert not selector_matches(NodeSelector(node_selector_terms=(empty,)), "node-1", LABELS)
    zone_a = NodeSelectorTerm(match_expressions=(_req("zone", "In", "a"),))
    assert selector_matches(NodeSelector(node_selector_terms=(empty, zone_a)), "node-1", LABELS)


@pytest.mark.parametrize(
    ("req", "matches"),
    [
        (_req("zone", "In", "a", "b"), True),
        (_req("zone", "In", "b"), False),
        (_req("rack", "In", "r1"), False),
        (_req("zone", "NotIn", "b"), True),
        (_req("zone", "NotIn", "a"), False),
        (_req("rack", "NotIn", "r1"), True),
        (_req("zone", "Exists"), True),
        (_req("rack", "Exists"), False),
        (_req("rack", "DoesNotExist"), True),
        (_req("zone", "DoesNotExist"), False),
        (_req("zone", "Equals", "a"), False),  # not an operator: the requirement never holds
    ],
    ids=lambda v: v if isinstance(v, bool) else f"{v.key}-{v.operator}-{','.join(v.values)}",
)
def test_label_operators(req: NodeSelectorRequirement, matches: bool) -> None:
    assert selector_matches(_labels(req), "node-1", LABELS) is matches


@pytest.mark.parametrize(
    ("req", "labels", "matches"),
    [
        (_req("gen", "Gt", "3"), LABELS, True),
        (_req("gen", "Gt", "4"), LABELS, False),  # strictly greater
        (_req("gen", "Lt", "5"), LABELS, True),
        (_req("gen", "Lt", "4"), LABELS, False),  # strictly less
        (_req("gen", "Gt", "-1"), {"gen": "0"}, True),
        (_req("gen", "Lt", "0"), {"gen": "-3"}, True),
        (_req("gen", "Gt", "9"), {"gen": "10"}, True),  # numeric, not string, order
        (_req("gen", "Gt", "3"), {}, False),  # absent label
        (_req("gen", "Lt", "3"), {}, False),
        (_req("gen", "Gt", "3"), {"gen": "four"}, False),  # the label is not an integer
        (_req("gen", "Gt", "three"), LABELS, False),  # the requirement is not an integer
        (_req("gen", "Gt", "1", "2"), LABELS, False),  # Gt takes exactly one value
        (_req("gen", "Lt"), LABELS, False),
        # Go's strconv.ParseInt(v, 10, 64), not Python's int(): a sign is fine, underscores,
        # spaces, other scripts' digits and values past 64 bits are not integers
        (_req("gen", "Gt", "+3"), LABELS, True),
        (_req("gen", "Gt", "5"), {"gen": "1_0"}, False),
        (_req("gen", "Gt", "5"), {"gen": " 7"}, False),
        (_req("gen", "Gt", "5"), {"gen": "\u0667"}, False),  # ARABIC-INDIC DIGIT SEVEN
        (_req("gen", "Gt", "5"), {"gen": str(2**63)}, False),
        (_req("gen", "Lt", "9223372036854775807"), {"gen": "-9223372036854775808"}, True),
    ],
)
def test_gt_and_lt_compare_integers(
    req: NodeSelectorRequirement, labels: dict[str, str], matches: bool
) -> None:
    assert selector_matches(_labels(req), "node-1", labels) is matches


@pytest.mark.parametrize(
    ("req", "node", "matches"),
    [
        (_req("metadata.name", "In", "node-1"), "node-1", True),
        (_req("metadata.name", "In", "node-1"), "node-2", False),
        (_req("metadata.name", "NotIn", "node-1"), "node-2", True),
        (_req("metadata.name", "NotIn", "node-1"), "node-1", False),
    ],
)
def test_match_fields_see_the_node_name(req: NodeSelectorRequirement, node: str, matches: bool) -> None:
    assert selector_matches(_fields(req), node, LABELS) is matches


def test_match_fields_do_not_see_labels() -> None:
    # a label called metadata.name is not the node's name, and the name is the only field
    assert not selector_matches(_fields(_req("metadata.name", "In", "x")), "node-1", {"metadata.name": "x"})
    assert not selector_matches(_fields(_req("zone", "In", "a")), "node-1", LABELS)
    assert not selector_matches(_fields(_req("zone", "In", "node-1")), "node-1", LABELS)


def test_requirements_of_a_term_are_anded_across_expressions_and_fields() -> None:
    term = NodeSelectorTerm(
        match_expressions=(_req("zone", "In", "a"), _req("gen", "Gt", "2")),
        match_fields=(_req("metadata.name", "In", "node-1"),),
    )
    sel = NodeSelector(node_selector_terms=(term,))
    assert selector_matches(sel, "node-1", LABELS)
    assert not selector_matches(sel, "node-2", LABELS)
    assert not selector_matches(sel, "node-1", {**LABELS, "zone": "b"})
    assert not selector_matches(sel, "node-1", {**LABELS, "gen": "1"})


def test_terms_are_ored() -> None:
    sel = NodeSelector(
        node_selector_terms=(
            NodeSelectorTerm(match_expressions=(_req("zone", "In", "b"),)),
            NodeSelectorTerm(match_fields=(_req("metadata.name", "In", "node-7"),)),
        )
    )
    assert selector_matches(sel, "node-1", {"zone": "b"})
    assert selector_matches(sel, "node-7", {"zone": "a"})
    assert not selector_matches(sel, "node-1", {"zone": "a"})


def test_node_names_selector_selects_exactly_those_nodes() -> None:
    sel = node_names_selector("node-1", "node-3")
    assert [selector_matches(sel, n, {}) for n in ("node-1", "node-2", "node-3")] == [True, False, True]
    # one single-valued matchFields requirement per term, as core/v1 validation allows
    assert all(
        not t.match_expressions and len(t.match_fields) == 1 and len(t.match_fields[0].values) == 1
        for t in sel.node_selector_terms
    )


def test_node_names_selector_without_names_selects_no_node() -> None:
    sel = node_names_selector()
    assert sel.node_selector_terms == ()
    assert not selector_matches(sel, "node-1", LABELS)
