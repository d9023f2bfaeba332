"""kubectl's JSONPath templates (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from services.cli.jsonpath import JSONPathError, Template, evaluate, render_value

LIST: dict[str, Any] = {
    "kind": "List",
    "items": [
        {"metadata": {"name": "a", "labels": {"x": "1"}}, "status": {"phase": "Running", "n": 3, "ok": True}},
        {"metadata": {"name": "b"}, "status": {"phase": "Pending", "n": 1, "ok": False}},
        {"metadata": {"name": "c"}, "status": {"phase": "Running", "n": 2}},
    ],
}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{.items[*].metadata.name}", "a b c"),
        ("{$.items[0].metadata.name}", "a"),
        ("{.items[-1].metadata.name}", "c"),
        ("{.items[0:2].metadata.name}", "a b"),
        ("{.items[1:].metadata.name}", "b c"),
        ("{.items[*]['metadata']['name']}", "a b c"),
        ('{.items[?(@.status.phase=="Running")].metadata.name}', "a c"),
        ('{.items[?(@.status.phase!="Running")].metadata.name}', "b"),
        ("{.items[?(@.status.n>1)].metadata.name}", "a c"),
        ("{.items[?(@.status.n<=1)].metadata.name}", "b"),
        ("{.items[?(@.status.n>=3)].metadata.name}", "a"),
        ("{.items[?(@.status.n<2)].metadata.name}", "b"),
        ("{.items[?(@.metadata.labels)].metadata.name}", "a"),
        ("{.items[?(@.status.ok==true)].metadata.name}", "a"),
        ("{..name}", "a b c"),
        ("{.items[0].status.*}", "Running 3 true"),
        ("{.items[0].metadata.labels}", '{"x":"1"}'),
        ("{.items[0].status.ok}", "true"),
        ("{.kind} has {.items[1].status.n} {'item'}", "List has 1 item"),
        ('{range .items[*]}[{.metadata.name}]{"\\n"}{end}', "[a]\n[b]\n[c]\n"),
        ('{range .items[?(@.status.phase=="Pending")]}{.metadata.name}{end}', "b"),
    ],
)
def test_templates(template: str, expected: str) -> None:
    assert Template(template).render(LIST) == expected


def test_errors_and_values() -> None:
    with pytest.raises(JSONPathError, match="nope is not found"):
        Template("{.items[0].nope}").render(LIST)
    for bad in ("{.items[0]", "{end}", "{range .items[*]}", "{.items[x]}", "{.items[0}"):
        with pytest.raises(JSONPathError):
            Template(bad).render(LIST)
    assert evaluate(".items[9]", LIST) == [] and evaluate("items[0].metadata.name", LIST) == ["a"]
    assert evaluate(".items[?(@.status.n > 'x')]", LIST) == []  # incomparable: no match
    assert render_value(None) == "" and render_value(1.5) == "1.5" and render_value([1, "a"]) == '[1,"a"]'
    assert Template("plain text").render({}) == "plain text"
