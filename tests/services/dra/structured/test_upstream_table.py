"""Every case of upstream's allocator test table, evaluated with draflow (in the default run).

Its input is upstream's Go source (``allocator_testing.go`` of kubernetes/dynamic-resource-allocation),
which the project does not ship. It is read from ``$DRAFLOW_UPSTREAM_ALLOCATOR_TESTING`` or from a
local mirror (see ``upstream/table.py`` next to this file). Without either, the module is skipped
with a reason saying how to provide it, and the run's summary says the table was not checked
(``conftest.py`` here); a path that is set but unreadable fails. To run it anywhere:

    curl -sSLo /tmp/allocator_testing.go \\
        https://raw.githubusercontent.com/kubernetes/dynamic-resource-allocation/master/structured/internal/allocatortesting/allocator_testing.go
    DRAFLOW_UPSTREAM_ALLOCATOR_TESTING=/tmp/allocator_testing.go \\
        pytest tests/services/dra/structured/test_upstream_table.py

See ``upstream/table.py`` for how answers are compared.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.services.dra.structured.upstream.table import MISSING, check_case, load_cases, upstream_source

pytestmark = pytest.mark.kep4381

_SRC = upstream_source()
if _SRC is None:
    pytest.skip(MISSING, allow_module_level=True)
_CASES: dict[str, Any] = load_cases(_SRC)


def test_table_loaded() -> None:
    assert len(_CASES) > 200


@pytest.mark.parametrize("name", sorted(_CASES))
def test_upstream_case(name: str) -> None:
    assert check_case(name, _CASES[name]) == []
