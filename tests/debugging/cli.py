"""Fixtures for the debugging tools: running the ``draflow`` CLI as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from infra.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def cli_env(settings: Settings, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DRAFLOW_NATS_URL": settings.nats_url,
        "DRAFLOW_STREAM": settings.stream,
        "DRAFLOW_SUBJECT_ROOT": settings.root,
        "DRAFLOW_DATA_DIR": str(settings.data_dir),
        **extra,
    }


def draflow(settings: Settings, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """``python -m services.cli ARGS`` against ``settings``' stream (output captured)."""
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT, env=cli_env(settings, **extra), capture_output=True, text=True, timeout=60,
    )
