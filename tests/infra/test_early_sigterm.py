"""A service stopped while it is still starting up exits cleanly (honcho stops everything at once)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from infra.natsd import free_port
from tests.paths import ROOT

# What `python -m services.<name>` does (services/__init__.py), then a SIGTERM that arrives before
# the event loop exists, then the ordinary service runner: it must stop at once with exit code 0.
SCRIPT = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from infra.signals import install_early
    install_early()
    os.kill(os.getpid(), signal.SIGTERM)
    from infra.service import run_service

    async def main(ctx):
        await asyncio.sleep(3600)

    sys.exit(run_service("early", main))
    """
)


def test_sigterm_during_start_up_is_a_clean_stop(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DRAFLOW_NATS_URL": f"nats://127.0.0.1:{free_port()}",  # nothing listens: still connecting
        "DRAFLOW_DATA_DIR": str(tmp_path),
    }
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_services_record_early_signals_only_when_run_as_a_service() -> None:
    probe = "import signal, services; print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)"
    as_library = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert as_library.stdout.strip() == "True", as_library.stderr


def test_apiserver_stops_on_sigterm_while_waiting_for_nats(tmp_path: Path) -> None:
    """honcho stops everything at once; the apiserver must not hang retrying a dead nats-server."""
    env = {
        **os.environ,
        "DRAFLOW_NATS_URL": f"nats://127.0.0.1:{free_port()}",  # nothing listens: still connecting
        "DRAFLOW_DATA_DIR": str(tmp_path),
        "DRAFLOW_LOG_LEVEL": "INFO",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.apiserver"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # up, and retrying the connection
            if "apiserver: connecting to" in line:
                break
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
