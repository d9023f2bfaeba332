"""docs/security.md shows the permission matrix nats-server is actually configured from."""

from __future__ import annotations

from draflow.infra.auth.roles import permission_matrix
from tests.paths import ROOT


def test_the_documented_matrix_is_the_configured_one() -> None:
    page = (ROOT / "docs" / "security.md").read_text()
    begin, end = "<!-- permission-matrix: begin -->\n", "<!-- permission-matrix: end -->"
    documented = page[page.index(begin) + len(begin) : page.index(end)]
    regenerate = "python -c 'from draflow.infra.auth.roles import permission_matrix as m; print(m())'"
    assert documented == permission_matrix(), f"regenerate the table: {regenerate}"
