"""Real draflow processes for tests: environment from Settings, both pipes drained, output kept."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from infra.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def service_env(settings: Settings, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DRAFLOW_NATS_URL": settings.nats_url,
        "DRAFLOW_STREAM": settings.stream,
        "DRAFLOW_SUBJECT_ROOT": settings.root,
        "DRAFLOW_DATA_DIR": str(settings.data_dir),
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


class Proc:
    """``python -m module args`` with the test's settings; ``expect`` waits for a stdout line."""

    def __init__(self, settings: Settings, module: str, args: list[str] | None = None, **env: str) -> None:
        self.name = " ".join([module, *(args or [])])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *(args or [])],
            cwd=ROOT,
            env=service_env(settings, **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        self._threads = [
            threading.Thread(target=self._read_out, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))
            del self.stderr[:-200]  # keep the tail for failure messages

    def expect(self, prefix: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0.01))
            except queue.Empty:
                raise AssertionError(
                    f"{self.name} did not print {prefix!r} within {timeout_s}s "
                    f"(exit {self.proc.poll()}); stderr tail:\n" + "\n".join(self.stderr[-40:])
                ) from None
            if line.startswith(prefix):
                return line

    def kill(self) -> int:
        self.proc.send_signal(signal.SIGKILL)
        return self.wait(10)

    def terminate(self, timeout_s: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float) -> int:
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        for t in self._threads:
            t.join(5)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        return code


async def stop_cleanly(procs: list[Proc]) -> None:
    """SIGTERM every process (the last started first, concurrently); each must exit with 0."""
    codes = await asyncio.gather(*(asyncio.to_thread(p.terminate) for p in reversed(procs)))
    assert all(code == 0 for code in codes), [
        (p.name, c, p.stderr[-5:]) for p, c in zip(reversed(procs), codes, strict=True)
    ]
