"""Opt-in cross-check: every case of upstream's allocator test table, evaluated with draflow.

Not collected by the default run (its input is upstream's Go source, which the project does not
ship). Run it explicitly when the allocator changes:

    DRAFLOW_UPSTREAM_ALLOCATOR_TESTING=/path/to/allocator_testing.go \\
        pytest tests/allocator/upstream_table_check.py

(or with a mirror of kubernetes/dynamic-resource-allocation at the path table.py names).
See tests/allocator/upstream/table.py for how answers are compared.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.allocator.upstream.table import check_case, load_cases, upstream_source

_SRC = upstream_source()
if _SRC is None:
    pytest.fail(
        "upstream allocator_testing.go not found: set DRAFLOW_UPSTREAM_ALLOCATOR_TESTING", pytrace=False
    )
_CASES: dict[str, Any] = load_cases(_SRC)


def test_table_loaded() -> None:
    assert len(_CASES) > 200


@pytest.mark.parametrize("name", sorted(_CASES))
def test_upstream_case(name: str) -> None:
    assert check_case(name, _CASES[name]) == []
