"""Conformance vectors (upstream's answers) and our own extra vectors, through ``draflow allocate``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import ROOT
from tests.services.dra.structured.harness import EXTRA, VECTORS, check_vector, run_cli

pytestmark = pytest.mark.kep4381


def test_all_vectors_present() -> None:
    index = (Path(__file__).parent / "vectors" / "INDEX.md").read_text()
    listed = {line.split("`")[1] for line in index.splitlines() if line.startswith("| `")}
    assert listed == {p.name for p in VECTORS}
    assert len(VECTORS) == 73


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_conformance_vector(path: Path) -> None:
    assert check_vector(path) == []


@pytest.mark.parametrize("path", EXTRA, ids=[p.stem for p in EXTRA])
def test_extra_vector(path: Path) -> None:
    vector = yaml.safe_load(path.read_text())
    assert vector["name"] == path.stem
    assert "derived" in vector["reflects"] or vector.get("notes"), "say where the expected answer comes from"
    assert check_vector(path) == []


def test_real_subprocess_run() -> None:
    """The console entry point in a fresh interpreter, as a user runs it."""
    path = Path(__file__).parent / "vectors" / "with-constraint-for-request-retry.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "draflow.services.cli.main", "allocate", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["ok"] is True
    devices = [d["device"] for d in got["allocations"]["claim-0"]["devices"]]
    assert devices == ["device-2", "device-3"]


def test_unreadable_file_is_exit_1_without_traceback(tmp_path: Path) -> None:
    code, out, err = run_cli(tmp_path / "missing.yaml")
    assert code == 1 and out == ""
    assert "cannot read" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("objects: [1", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("node: node-1\nobjects: {}\nallocate: []\n", "`objects` must be a list"),
        (
            "node: node-1\nallocate: [c]\nobjects:\n"
            "- {apiVersion: v1, kind: Node, metadata: {name: node-1}, bogus: 1}\n",
            'unknown field "bogus"',
        ),
        (
            "node: node-9\nallocate: []\nobjects:\n- {apiVersion: v1, kind: Node, metadata: {name: n}}\n",
            "node-9",
        ),
        (
            "node: n\nallocate: [nope]\nobjects:\n- {apiVersion: v1, kind: Node, metadata: {name: n}}\n",
            "nope",
        ),
    ],
)
def test_undecodable_scenario_is_exit_1(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    code, out, err = run_cli(path)
    assert code == 1 and out == ""
    assert message in err and "Traceback" not in err
