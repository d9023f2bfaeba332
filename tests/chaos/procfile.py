"""Every line of a Procfile as its own process, killed and started again one by one.

honcho stops everything when one process dies; a chaos run needs the opposite: each service (and
each nats-server) is started from its Procfile line exactly as honcho would run it (``bash -c``,
the line's own variables, the system's ``DRAFLOW_PORT_OFFSET`` and data dir), then SIGKILLed and
started again by the run, the way a supervisor (systemd, Kubernetes) would bring it back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.paths import ROOT

VENV_BIN = Path(sys.executable).parent


def procfile_lines(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, command = line.split(":", 1)
            out[name.strip()] = command.strip()
    return out


class ProcSystem:
    """The processes of ``names`` (all lines when None) from ``procfile``, each restartable."""

    def __init__(self, procfile: Path, data_dir: Path, offset: int, names: list[str] | None = None) -> None:
        lines = procfile_lines(procfile)
        self.commands = {n: lines[n] for n in (names or list(lines))}
        self.data_dir = data_dir
        self.logs = data_dir.parent / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DRAFLOW_", "OTEL_"))},
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "DRAFLOW_DATA_DIR": str(data_dir),
            "DRAFLOW_PORT_OFFSET": str(offset),
            "OTEL_TRACES_EXPORTER": "none",
            "PYTHONUNBUFFERED": "1",
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.starts: dict[str, int] = {}
        self.killed: set[str] = set()  # stopped by ``kill`` and not started since

    def start(self, name: str) -> None:
        self.starts[name] = self.starts.get(name, 0) + 1
        self.killed.discard(name)
        log = open(self.logs / f"{name}.log", "ab")
        log.write(f"--- start {self.starts[name]} at {time.strftime('%H:%M:%S')}\n".encode())
        log.flush()
        self.procs[name] = subprocess.Popen(
            ["bash", "-c", self.commands[name]],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def start_all(self) -> None:
        for name in self.commands:
            self.start(name)

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def kill(self, name: str) -> None:
        """SIGKILL, no warning: the process group (the service; a nats launcher and its server)."""
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        self.killed.add(name)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)

    def exited(self) -> dict[str, int]:
        """Processes that ended although nobody killed them, with their exit codes: a service that
        stops by itself under chaos is a bug even when a supervisor would start it again."""
        return {
            name: code
            for name, proc in self.procs.items()
            if name not in self.killed and (code := proc.poll()) is not None
        }

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def tail(self, name: str, chars: int = 3000) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""
