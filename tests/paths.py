"""Where things are: the checkout, its examples and the tests' data (one place, so tests can move)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
EXAMPLES = ROOT / "examples"
DATA = TESTS / "data"
REALWORLD = DATA / "realworld"
GOLDEN = DATA / "golden"
