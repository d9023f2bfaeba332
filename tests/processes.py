"""The one helper for tests that start real draflow processes.

* :class:`Proc`: ``python -m MODULE ARGS`` (a service, the CLI, a test's own worker) with the
  test's settings in its environment; stdout read line by line (``expect``), stderr kept as a tail
  for failure messages (or merged into stdout). Every Proc still running when its test ends is
  killed (``tests/conftest.py``), whatever the test's outcome.
* :func:`draflow`: one CLI command as a separate process, output captured (:func:`draflow_out`:
  one that must succeed, its stdout).
* :func:`running_system`: the apiserver, then the given services (each waited for until it says
  it is ready) and a probe runtime; every process stopped cleanly (exit 0) afterwards.
* :class:`HonchoSystem`: ``honcho start`` from the repository's Procfile, as a user runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from draflow.infra.config import Settings
from draflow.services.runtime.controller import Runtime
from tests.paths import ROOT
from tests.shells import start_runtime

VENV_BIN = Path(sys.executable).parent

__all__ = [
    "GPU_PLUGIN",
    "ROOT",
    "VENV_BIN",
    "HonchoSystem",
    "Proc",
    "Service",
    "draflow",
    "draflow_out",
    "node_services",
    "running_system",
    "service_env",
    "stop_cleanly",
]


def service_env(settings: Settings, **extra: str) -> dict[str, str]:
    """This process's environment pointed at ``settings``' stream and data dir."""
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

    running: ClassVar[list[Proc]] = []  # started and not waited for (tests/conftest.py kills them)

    def __init__(
        self,
        settings: Settings,
        module: str,
        args: list[str] | None = None,
        env: Mapping[str, str] | None = None,
        *,
        merge_stderr: bool = False,
        **extra_env: str,
    ) -> None:
        self.name = " ".join([module, *(args or [])])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *(args or [])],
            cwd=ROOT,
            env=service_env(settings, **{**(env or {}), **extra_env}),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        self._threads = [threading.Thread(target=self._read_out, daemon=True)]
        if not merge_stderr:
            self._threads.append(threading.Thread(target=self._read_err, daemon=True))
        for t in self._threads:
            t.start()
        Proc.running.append(self)

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))
            del self.stderr[:-200]  # keep the tail for failure messages

    def expect(self, prefix: str, timeout_s: float = 60.0, *, anywhere: bool = False) -> str:
        """The next stdout line starting with ``prefix`` (containing it, with ``anywhere``)."""
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
            if (prefix in line) if anywhere else line.startswith(prefix):
                return line

    def kill(self) -> int:
        """SIGKILL; the exit code (``-SIGKILL`` unless it had exited already)."""
        self.proc.send_signal(signal.SIGKILL)
        return self.wait(10)

    def terminate(self, timeout_s: float = 15.0) -> int:
        """SIGTERM, as honcho and systemd stop a service; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float = 30.0) -> int:
        """Its exit code; killed if it has not exited within ``timeout_s``."""
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
        with contextlib.suppress(ValueError):
            Proc.running.remove(self)
        return code


async def stop_cleanly(procs: list[Proc]) -> None:
    """SIGTERM every process (the last started first, concurrently); each must exit with 0."""
    codes = await asyncio.gather(*(asyncio.to_thread(p.terminate) for p in reversed(procs)))
    assert all(code == 0 for code in codes), [
        (p.name, c, p.stderr[-5:]) for p, c in zip(reversed(procs), codes, strict=True)
    ]


def draflow(
    settings: Settings, *args: str, stdin: str | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    """``python -m draflow.services.cli ARGS`` against ``settings``' stream (output captured)."""
    return subprocess.run(
        [sys.executable, "-m", "draflow.services.cli", *args],
        cwd=ROOT,
        env=service_env(settings, **extra),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def draflow_out(settings: Settings, *args: str, stdin: str | None = None) -> str:
    """The stdout of a CLI command that must succeed (its stderr is the failure message)."""
    done = draflow(settings, *args, stdin=stdin)
    assert done.returncode == 0, f"draflow {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
    return done.stdout


# module, arguments, the stdout line that says it is ready (None: do not wait)
Service = tuple[str, list[str], str | None]

GPU_PLUGIN = "draflow.services.drivers.gpu_example.node"
CLASSIC_PLUGIN = "draflow.services.drivers.classic_plugin"  # --driver fpga.example.com|gpu.acme.com


def node_services(node: str, gpus: int, *kubelet_args: str, plugin_args: Sequence[str] = ()) -> list[Service]:
    """One node as the Procfile runs it: its kubelet and, with GPUs, its gpu.example.com kubelet
    plugin process (which registers through the kubelet's plugins_registry)."""
    out: list[Service] = [
        (
            "draflow.services.kubelet",
            ["--node", node, "--gpus", str(gpus), *kubelet_args],
            f"kubelet {node}: registered",
        )
    ]
    if gpus > 0:
        out.append(
            (
                GPU_PLUGIN,
                ["--node", node, "--gpus", str(gpus), *plugin_args],
                f"gpu.example.com plugin on {node}",
            )
        )
    return out


@contextlib.asynccontextmanager
async def running_system(
    settings: Settings,
    services: Sequence[Service],
    *,
    before: Callable[[Runtime], Awaitable[None]] | None = None,
) -> AsyncIterator[tuple[Runtime, list[Proc]]]:
    """The apiserver, a probe runtime (``before(probe)`` may apply objects the services must find at
    start), then ``services`` in order, each waited for; yields the probe and the processes (the
    apiserver first). Afterwards every process gets SIGTERM and must exit with 0."""
    procs = [Proc(settings, "draflow.services.apiserver")]
    try:
        await asyncio.to_thread(procs[0].expect, "apiserver: serving", 60)
        probe, events = await start_runtime(settings, "e2e-probe")
        try:
            if before is not None:
                await before(probe)
            started = [Proc(settings, module, args) for module, args, _ in services]
            procs += started
            for proc, (_, _, ready) in zip(started, services, strict=True):
                if ready:
                    await asyncio.to_thread(proc.expect, ready, 90)
            yield probe, procs
        finally:
            await probe.stop()
            await events.close()
    finally:
        await stop_cleanly(procs)


class HonchoSystem:
    """``honcho start`` from the repository's Procfile as a user runs it.

    The environment is the user's minus every ``DRAFLOW_*`` and ``OTEL_*`` variable (the test suite
    sets some), plus a data dir and the given extras: what is not set is derived, as on a fresh
    machine. honcho runs in a session of its own, so ``ctrl_c`` sends SIGINT to its process group
    as a terminal's Ctrl-C does (honcho then sends SIGTERM to each process it started).
    """

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
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
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
            if name not in stopped and (str(VENV_BIN) in cmdline or "draflow.services." in cmdline):
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
