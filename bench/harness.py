"""What the benchmarks share: a private nats-server and event store, the services as real
processes (optionally under a sampling profiler), their CPU time, log timestamps, percentiles.

One copy, so every benchmark measures the same way: the services get the same environment
(untraced unless asked, WARNING logs into ``<data dir>/<name>.log``), CPU is user + system time
from ``/proc/<pid>/stat`` of the service process itself (not of a profiler wrapping it), and
"when" is JetStream's storage time of an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore, RawRecord
from draflow.infra.natsd import LocalNatsServer
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.tail import Tail

__all__ = [
    "ROOT",
    "Bus",
    "Profiler",
    "ProfilerMissing",
    "Services",
    "cpu_s",
    "machine",
    "pct",
    "service_env",
    "stored_at",
    "until",
]

ROOT = Path(__file__).resolve().parents[1]


def service_env(settings: Settings, *, log_level: str = "WARNING", **extra: str) -> dict[str, str]:
    """The environment of a service process on ``settings``' bus (tracing off unless the caller's
    environment turns it on)."""
    return {
        "OTEL_TRACES_EXPORTER": "none",
        **os.environ,
        "DRAFLOW_NATS_URL": settings.nats_url,
        "DRAFLOW_STREAM": settings.stream,
        "DRAFLOW_SUBJECT_ROOT": settings.root,
        "DRAFLOW_DATA_DIR": str(settings.data_dir),
        "DRAFLOW_LOG_LEVEL": log_level,
        **extra,
    }


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank below), NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def stored_at(rec: RawRecord) -> float:
    """When JetStream stored the message (epoch seconds)."""
    if rec.ts_ns:
        return rec.ts_ns / 1e9
    t = rec.time
    return t.timestamp() if t is not None else time.time()


async def until(check: Callable[[], bool], changed: asyncio.Event, timeout_s: float, what: str) -> None:
    """Wait until ``check()`` holds, looking again whenever ``changed`` is set (and twice a second)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        changed.clear()
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out waiting for {what}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), min(left, 0.5))


def template_pod(name: str, namespace: str, template: str) -> dict[str, Any]:
    """A one-container pod whose one claim ``gpu`` comes from the ResourceClaimTemplate
    ``template``: the pod every scheduling bench creates."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def gpu_template(name: str, namespace: str, device_class: str = "gpu.example.com") -> dict[str, Any]:
    """A ResourceClaimTemplate of one request ``gpu`` for exactly one device of ``device_class``:
    what ``template_pod``'s claim comes from."""
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def report(measurement: Coroutine[Any, Any, dict[str, Any]], *, as_json: bool) -> int:
    """Run a bench's measurement; with ``--json`` its result is printed as the last line (the
    human-readable figures went to stderr/stdout as it ran). The exit code of ``main``."""
    result = asyncio.run(measurement)
    if as_json:
        print(json.dumps(result))
    return 0


def machine() -> dict[str, Any]:
    """Date, cores and load average, for the figures' record."""
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


class Bus:
    """A private nats-server in a fresh temporary folder, its ``Settings`` and an event store
    (``actor``) on it: ``async with Bus("draflow-bench-") as bus: ...``."""

    def __init__(
        self,
        prefix: str,
        *,
        stream: str = "BENCH",
        root: str = "bench",
        actor: str = "bench",
        tmp_dir: str | None = None,
        keep: bool = True,
        data: str = "data",
    ) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=tmp_dir))
        self.data = data
        self.server = LocalNatsServer(self.tmp / "nats")
        self.stream, self.root, self.actor, self.keep = stream, root, actor, keep
        self._store: EventStore | None = None

    @property
    def settings(self) -> Settings:
        return Settings(
            nats_url=self.server.url, data_dir=self.tmp / self.data, stream=self.stream, root=self.root
        )

    @property
    def store(self) -> EventStore:
        assert self._store is not None, "the bus is not started"
        return self._store

    @property
    def nats_pid(self) -> int | None:
        return self.server.proc.pid if self.server.proc is not None else None

    async def __aenter__(self) -> Bus:
        self.server.start()
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._store = await EventStore.open(self.settings, self.actor)
        except BaseException:
            self.server.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self._store is not None:
                await self._store.close()
        finally:
            self.server.stop()
            if not self.keep:
                shutil.rmtree(self.tmp, ignore_errors=True)


class ProfilerMissing(RuntimeError):
    """``--profile`` without py-spy installed."""


def _profiler() -> str:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if found is None:
        raise ProfilerMissing(
            "--profile needs py-spy, which is not installed: pip install 'draflow[profile]' "
            "(or pip install py-spy)"
        )
    return found


class Profiler:
    """py-spy attached to running services for a while (``--profile windows``): one flame graph
    per process, ``<name>-<tag>.svg``. Attaching needs the right to read another process's
    memory (same user without Yama's restriction, or root)."""

    def __init__(self, out_dir: Path, rate: int = 250) -> None:
        self.exe = _profiler()
        self.out_dir = out_dir
        self.rate = rate

    async def start(
        self, pids: Mapping[str, int], seconds: float, tag: str
    ) -> list[asyncio.subprocess.Process]:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        procs = []
        for name, pid in pids.items():
            svg = self.out_dir / f"{name}-{tag}.svg"
            argv = [
                self.exe,
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(max(1, round(seconds))),
                "--rate",
                str(self.rate),
                "--nonblocking",
                "--format",
                "flamegraph",
                "--output",
                str(svg),
            ]
            procs.append(
                await asyncio.create_subprocess_exec(
                    *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
                )
            )
        return procs

    @staticmethod
    async def finish(procs: list[asyncio.subprocess.Process], timeout_s: float = 60.0) -> None:
        """Wait for the recordings to end; say why one failed (e.g. not allowed to attach)."""
        for proc in procs:
            try:
                _, err = await asyncio.wait_for(proc.communicate(), timeout_s)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                continue
            if proc.returncode:
                print(f"py-spy: {err.decode(errors='replace').strip()[-500:]}", file=sys.stderr)


class Services:
    """The services of one benchmark run as ``python -m <module>`` processes on ``settings``' bus.

    ``profile_dir``: run each under ``py-spy record`` from its start and write ``<name>.svg`` (a
    flame graph of its whole life) there when it stops; CPU and signals then go to the service
    process, py-spy's child. (:class:`Profiler` attaches for a while instead.)"""

    def __init__(
        self,
        settings: Settings,
        *,
        profile_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        profile_rate: int = 250,
    ) -> None:
        self.settings = settings
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.profile_dir = profile_dir
        self.profile_rate = profile_rate
        self._py_spy = _profiler() if profile_dir is not None else ""
        self._env = dict(env or {})
        self._child: dict[str, int] = {}

    async def spawn(
        self, name: str, module: str, *args: str, nice: int = 0, **env: str
    ) -> asyncio.subprocess.Process:
        """``nice``: start it under ``nice -n`` (every thread from its first instruction; ``nice``
        execs, so the process id, and with it the CPU count, stays the service's)."""
        argv = [sys.executable, "-m", module, *args]
        if self.profile_dir is not None:
            self.profile_dir.mkdir(parents=True, exist_ok=True)
            svg = self.profile_dir / f"{name}.svg"
            argv = [
                self._py_spy,
                "record",
                "--rate",
                str(self.profile_rate),
                "--nonblocking",
                "--format",
                "flamegraph",
                "--output",
                str(svg),
                "--",
                *argv,
            ]
        if nice:
            argv = ["nice", "-n", str(nice), *argv]
        environ = service_env(self.settings, **{**self._env, **env})
        with open(self.settings.data_dir / f"{name}.log", "wb") as log:  # noqa: ASYNC230
            proc = await asyncio.create_subprocess_exec(*argv, cwd=ROOT, env=environ, stdout=log, stderr=log)
        self.procs[name] = proc
        return proc

    def pid(self, name: str) -> int:
        """The service's own process id (under the profiler: py-spy's child, once started)."""
        proc = self.procs[name]
        if self.profile_dir is None:
            return proc.pid
        if name not in self._child:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
                except OSError:
                    kids = []
                if kids:
                    self._child[name] = int(kids[0])
                    break
                time.sleep(0.01)
            else:
                raise RuntimeError(f"{name}: py-spy started no process")
        return self._child[name]

    def niceness(self, name: str) -> int:
        """The service's niceness as the kernel holds it."""
        return os.getpriority(os.PRIO_PROCESS, self.pid(name))

    def signal(self, name: str, sig: int) -> None:
        os.kill(self.pid(name), sig)

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far per service."""
        return {name: cpu_s(self.pid(name)) for name in self.procs}

    async def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (after SIGCONT, in case one was paused) to every service, then wait; a
        profiled service's py-spy writes its flame graph once the service has exited."""
        targets = {}
        for name, proc in self.procs.items():
            if proc.returncode is None:
                with contextlib.suppress(Exception):
                    targets[name] = self.pid(name)
        for pid in targets.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGTERM)
        for name, proc in self.procs.items():
            try:
                await asyncio.wait_for(proc.wait(), timeout_s * (3 if self.profile_dir else 1))
            except TimeoutError:
                for pid in {targets.get(name, proc.pid), proc.pid}:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                await proc.wait()


async def spawn_apiserver(services: Services, replica: str = "", *, replica_nice: int = 0) -> None:
    """The control plane's apiserver as ``apiserver``. With ``replica`` (an address), the
    Kubernetes API is served there by an apiserver replica of its own (``--kube-api-only``, as
    ``kubeapi``, under ``nice -n replica_nice``) and the control plane's apiserver serves none, as
    the Procfile deploys it; without, the apiserver serves it where ``DRAFLOW_KUBE_API`` says."""
    if not replica:
        await services.spawn("apiserver", "draflow.services.apiserver")
        return
    await services.spawn("apiserver", "draflow.services.apiserver", DRAFLOW_KUBE_API="off")
    argv = ("--kube-api", replica, "--kube-api-only")
    await services.spawn("kubeapi", "draflow.services.apiserver", *argv, nice=replica_nice)


class LogFollower:
    """Follows the whole log from its start in a task; a subclass's ``apply`` reads each record
    (a record it cannot read is reported and skipped, so a bench keeps measuring) and ``changed``
    is set after every batch, for waits on what the log shows."""

    def __init__(self, store: EventStore, *, idle_poll_s: float = 0.2) -> None:
        self.changed = asyncio.Event()
        self._tail = Tail(store, f"{store.root}.ev.>", 1, idle_poll_s=idle_poll_s)
        self._task: asyncio.Task[None] | None = None

    def apply(self, rec: RawRecord) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        await self._tail.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self) -> None:
        async for records in self._tail.batches():
            for rec in records:
                try:
                    self.apply(rec)
                except Exception as exc:  # keep measuring; say what could not be read
                    name = type(self).__name__
                    print(f"{name}: event {rec.seq} on {rec.subject}: {exc!r}", file=sys.stderr)
            self.changed.set()


async def serving_api(settings: Settings, *, attempts: int = 300) -> ApiClient:
    """A client of the apiserver once it answers (a LIST of Nodes), for a bench that just started it."""
    api = await ApiClient.connect(settings, actor="bench", timeout_s=60.0)
    for _ in range(attempts):
        try:
            await api.list("Node")
            break
        except Exception:
            await asyncio.sleep(0.1)
    return api
