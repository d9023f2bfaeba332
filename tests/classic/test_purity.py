"""The classic deciders and drivers are pure: importing them loads no NATS or SQLite code."""

from __future__ import annotations

import subprocess
import sys

PURE = (
    "events.api.classic_pod",
    "services.dra.classic.validation",
    "services.driver_controller.controller",
    "services.driver_controller.sagas",
    "services.scheduler.plugins.classic.scheduling",
    "services.dra.classic.podclaims",
    "services.kubelet.classic_admission",
    "services.drivers.fpga_example",
    "services.drivers.acme_gpu",
    "services.scheduler.plugins.classic.plugin",
    "services.scheduler.plugins.classic.writes",
)


def test_pure_modules_import_no_io_libraries() -> None:
    # Only what these imports add counts: a coverage run's own data file (SQLite) is loaded before.
    code = (
        "import sys\n"
        + "before = set(sys.modules)\n"
        + "".join(f"import {m}\n" for m in PURE)
        + "io = ('nats', 'sqlite3', 'aiosqlite', 'infra')\n"
        + "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in io))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
