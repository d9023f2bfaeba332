"""ruff and mypy are part of the test suite, so the README's one test command checks them too."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.paths import ROOT


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    assert found, f"{name} is not installed next to {sys.executable}; install the 'test' extra"
    return found


def test_ruff_clean() -> None:
    proc = subprocess.run([_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_clean() -> None:
    proc = subprocess.run(
        # through the one import root: draflow/<folder> links to each top-level folder, and mypy
        # must see each file once, by the name the code imports it with ([tool.mypy] files)
        [_tool("mypy"), "draflow", "bench", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
