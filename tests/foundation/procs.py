"""Running draflow processes from tests: environment from Settings, output read line by line."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from infra.config import Settings

ROOT = Path(__file__).resolve().parents[2]
SAGA_WORKER = "tests.foundation.saga_worker"
TRACE_SERVICES = "tests.foundation.trace_services"


class Worker:
    def __init__(
        self,
        settings: Settings,
        module: str,
        args: list[str],
        env: dict[str, str] | None = None,
        *,
        merge_stderr: bool = False,
    ) -> None:
        full_env = {
            **os.environ,
            "DRAFLOW_NATS_URL": settings.nats_url,
            "DRAFLOW_STREAM": settings.stream,
            "DRAFLOW_SUBJECT_ROOT": settings.root,
            "DRAFLOW_DATA_DIR": str(settings.data_dir),
            **(env or {}),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def expect(self, prefix: str, timeout_s: float = 30.0, *, anywhere: bool = False) -> str:
        """The first line starting with ``prefix`` (containing it, with ``anywhere``)."""
        try:
            while True:
                line = self.lines.get(timeout=timeout_s)
                if (prefix in line) if anywhere else line.startswith(prefix):
                    return line
        except queue.Empty:
            self.proc.kill()
            self.proc.wait(10)
            err = self.proc.stderr.read() if self.proc.stderr else ""
            self.close()
            raise AssertionError(
                f"worker did not print {prefix!r} within {timeout_s}s; stderr:\n{err}"
            ) from None

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(10) == -signal.SIGKILL
        self.close()

    def finish(self, timeout_s: float = 30.0) -> int:
        code = self.proc.wait(timeout_s)
        self.close()
        return code

    def close(self) -> None:
        self.reader.join(10)  # ends at EOF, once the process is gone
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
