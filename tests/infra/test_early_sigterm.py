"""A service stopped while it is still starting up exits cleanly (honcho stops everything at once)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from draflow.infra.natsd import free_port
from tests.paths import ROOT

# What a service's __main__ does first, then a SIGTERM that arrives before the event loop exists,
# then the ordinary service runner: it must stop at once with exit code 0.
SCRIPT = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from draflow.infra.signals import install_early
    install_early()
    os.kill(os.getpid(), signal.SIGTERM)
    from draflow.infra.service import run_service

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


# Runs every service's __main__ as `python -m` does (run_name "__main__"), up to where it would
# start serving (`--help` for those that parse arguments; run_service and asyncio.run return at
# once), and reports whether SIGTERM is recorded by then.
PROBE = textwrap.dedent(
    """
    import asyncio, contextlib, io, runpy, signal, sys
    from draflow.infra import service, signals
    service.run_service = lambda *args, **kwargs: 0
    asyncio.run = lambda coro, **kwargs: coro.close() or 0
    for module in sys.argv[1:]:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.argv = [module, "--help"]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        print(module, signal.getsignal(signal.SIGTERM) is signals._record)
    """
)


def _service_mains() -> list[str]:
    services = ROOT / "services"
    mains = [*services.glob("*/__main__.py"), *(services / "drivers").glob("*/__main__.py")]
    return sorted(
        "draflow." + ".".join(p.parent.relative_to(ROOT).parts) for p in mains if p.parent.name != "cli"
    )


def test_every_service_records_early_signals_when_it_runs() -> None:
    """``python -m draflow.services.<name>`` records a SIGTERM from its first line on: each
    service's ``__main__`` installs it before its own imports (nothing else does: importing the
    packages, or a ``__main__`` as a library, leaves the default handler)."""
    mains = _service_mains()
    assert len(mains) >= 12 and "draflow.services.scheduler" in mains
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *mains], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [f"{m} True" for m in mains], run.stdout + run.stderr
    probe = (
        "import signal, importlib\n"
        + "".join(f"importlib.import_module('{m}.__main__')\n" for m in mains)
        + "print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)"
    )
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
        [sys.executable, "-m", "draflow.services.apiserver"],
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
