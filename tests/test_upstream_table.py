"""docs/upstream-e2e.md is the table ``tests.upstream_table`` generates from the ``upstream_e2e``
markers, and every marker names a scenario of Kubernetes' DRA e2e suite (issue 23)."""

from __future__ import annotations

from pathlib import Path

from tests.upstream_table import NOT_COVERED, PAGE, UPSTREAM, Marker, markers, render, scenario_of


def test_every_marker_names_an_upstream_scenario() -> None:
    found = markers()
    assert len(found) >= 20
    unknown = [m for m in found if scenario_of(m) is None]
    assert not unknown, f"markers naming no (or no unique) upstream It: {unknown}"


def test_the_page_is_the_generated_table() -> None:
    assert PAGE.read_text() == render(), (
        "docs/upstream-e2e.md is out of date: run python -m tests.upstream_table"
    )


def test_uncovered_scenarios_say_why_and_covered_ones_do_not() -> None:
    covered = {scenario_of(m) for m in markers()}
    assert set(NOT_COVERED) <= set(UPSTREAM)
    assert not covered & set(NOT_COVERED), "a covered scenario still has a not-covered note"
    assert len(set(UPSTREAM)) == len(UPSTREAM)


def test_the_table_follows_the_markers(tmp_path: Path) -> None:
    """A marker in some test file makes its scenario covered, naming the test; none: the note."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text(
        "import pytest\n\n"
        '@pytest.mark.upstream_e2e("rolling update")\n'
        "async def test_rolls() -> None: ...\n\n"
        '@pytest.mark.upstream_e2e("supports simple ResourceClaim", context="with v1beta2 API")\n'
        "def test_v1beta2() -> None: ...\n"
    )
    found = markers(tmp_path)
    assert found == [
        Marker("rolling update", "", "tests/test_x.py::test_rolls"),
        Marker("supports simple ResourceClaim", "with v1beta2 API", "tests/test_x.py::test_v1beta2"),
    ]
    page = render(found)
    assert "| kubelet | rolling update | yes | `tests/test_x.py::test_rolls` |" in page
    assert (
        "| with v1beta2 API | supports simple ResourceClaim | yes | `tests/test_x.py::test_v1beta2` |" in page
    )
    assert "| with v1beta1 API | supports simple ResourceClaim | no |" in page
    assert scenario_of(Marker("supports simple ResourceClaim", "", "x")) is None  # ambiguous without context
