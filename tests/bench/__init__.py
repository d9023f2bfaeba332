"""Tests of the benches: each runs its bench as a process in a tiny shape (``run_bench``)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.paths import ROOT


def run_bench(module: str, *args: str, timeout_s: float = 280) -> tuple[dict[str, Any], str]:
    """``python -m <module> <args> --json``: its JSON line (the last one printed) and its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1])), done.stdout
