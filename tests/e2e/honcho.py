"""``honcho start`` from the repository's Procfile as a user runs it, for tests.

The environment is the user's minus every ``DRAFLOW_*`` and ``OTEL_*`` variable (the test suite
sets some), plus a data dir and the given extras: what is not set is derived, as on a fresh
machine. honcho runs in a session of its own, so ``ctrl_c`` sends SIGINT to its process group as a
terminal's Ctrl-C does (honcho then sends SIGTERM to each process it started).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.e2e.procs import ROOT

VENV_BIN = Path(sys.executable).parent


class HonchoSystem:
    def __init__(self, data_dir: Path, processes: tuple[str, ...] = (), **env: str) -> None:
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DRAFLOW_", "OTEL_"))},
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # `. .venv/bin/activate`
            "VIRTUAL_ENV": str(VENV_BIN.parent),
            "DRAFLOW_DATA_DIR": str(data_dir),
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.log = tempfile.TemporaryFile("w+")
        self.final = ""
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "honcho"), "start", *processes],
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def output(self) -> str:
        if self.log.closed:
            return self.final
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def draflow(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The CLI with the system's environment (no flag: it finds the system by itself)."""
        return subprocess.run(
            [str(VENV_BIN / "draflow"), *args],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=60,
        )

    def wait_until_it_answers(self, timeout_s: float = 90) -> None:
        """Until the event log (nats-server, a stream) and the apiserver answer."""
        deadline = time.monotonic() + timeout_s
        for command in (("log",), ("get", "namespaces")):
            while (answer := self.draflow(*command)).returncode != 0:
                assert self.proc.poll() is None, f"honcho exited early:\n{self.output()[-4000:]}"
                assert time.monotonic() < deadline, f"the system never answered: {answer.stderr}"
                time.sleep(0.3)

    def ctrl_c(self, timeout_s: float = 20) -> str:
        """Ctrl-C: SIGINT to honcho's process group; returns everything the system printed."""
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout_s)
        finally:
            self.kill()
        return self.final

    def _unstopped(self) -> list[int]:
        """Processes honcho started and did not see stop that still run one of ours (a pid is
        only trusted while its command line is still this checkout's: pids get reused)."""
        output = self.output()
        stopped = set(re.findall(r"(\S+) stopped \(rc=", output))
        pids = []
        for name, pid in re.findall(r"(\S+) started \(pid=(\d+)\)", output):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if name not in stopped and (str(VENV_BIN) in cmdline or "services." in cmdline):
                pids.append(int(pid))
        return pids

    def kill(self) -> None:
        """Stop whatever is left: honcho (which stops its processes), then any process it started
        that still runs. honcho starts each process in a session of its own, so a signal to
        honcho's group reaches honcho only, as a terminal's Ctrl-C does."""
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        for pid in self._unstopped():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if not self.log.closed:
            self.final = self.output()
            self.log.close()
