"""The run's summary says whether upstream's allocator table was checked (its input is optional)."""

from __future__ import annotations

import pytest

_TABLE = "tests/services/dra/structured/test_upstream_table.py"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    ran = 0
    reason = ""
    for kind in ("passed", "failed", "skipped"):
        for report in terminalreporter.stats.get(kind, []):
            if not getattr(report, "nodeid", "").startswith(_TABLE):
                continue
            if kind != "skipped":
                ran += 1
            elif isinstance(report.longrepr, tuple):
                reason = report.longrepr[2].removeprefix("Skipped: ")
    if ran:
        terminalreporter.write_line(f"upstream allocator table: {ran} checks run (allocator_testing.go)")
    elif reason:
        terminalreporter.write_line(reason, yellow=True)
