"""The watchers of ``bench.kubeapi`` (and ``bench.watch_fanout``): ``n`` watchers of every pod
over HTTPS in a process of their own, as kubectl or a controller would be, so their client work
is not done on the bench's event loop and its CPU and niceness are the process's own.

``python -m bench.kubeapi_watchers N --port P --data-dir D``: connects N watchers to the
Kubernetes API on 127.0.0.1:P with the admin credentials of data dir D, prints "ready" once all
are connected, then, on a line on stdin, one JSON line (events received, CPU seconds, niceness,
and the probe's samples).

The first watcher is also a probe: for every ``PROBE_EVERY``-th event line it received it notes the
object's resourceVersion (the stream sequence of the change) and the wall-clock time it arrived, so
the bench can tell how long after JetStream stored a change the watchers got it, under load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import ssl
import sys
import time
from pathlib import Path

import aiohttp

from bench.harness import ROOT
from draflow.infra.config import Settings
from draflow.services.apiserver.kubeapi.auth import load_or_create


class Client:
    """The admin's HTTPS session to the API of a system's data dir."""

    def __init__(self, url: str, data_dir: Path) -> None:
        creds = load_or_create(data_dir / "kubeapi", "127.0.0.1")
        self.url = url
        self.ssl = ssl.create_default_context(cadata=creds.ca_pem.decode())
        self.headers = {"Authorization": f"Bearer {creds.token_of('admin')}"}
        self.session = aiohttp.ClientSession()

    async def get(self, path: str, accept: str = "application/json") -> bytes:
        async with self.session.get(
            self.url + path, headers={**self.headers, "Accept": accept}, ssl=self.ssl
        ) as resp:
            assert resp.status == 200, (resp.status, await resp.text())
            return await resp.read()

    async def close(self) -> None:
        await self.session.close()


async def wait_kube(data_dir: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not (data_dir / "kubeconfig").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the Kubernetes API never started")
        await asyncio.sleep(0.1)


PROBE_EVERY = 5  # the probe samples every 5th event line of its watch
PROBE_MAX = 20_000
_RV = re.compile(rb'"resourceVersion":"(\d+)"')  # the first in a line is the object's own


class Fleet:
    """``n`` watchers of every pod, each its own HTTPS connection; events counted, not decoded
    (but by the probe, the first, which samples arrival times)."""

    def __init__(self, n: int, port: int, data_dir: Path) -> None:
        self.n, self.port, self.data_dir = n, port, data_dir
        self.events = 0
        self.connected = 0
        self.all_connected = asyncio.Event()
        self.clients: list[Client] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.probe: list[tuple[int, float]] = []  # (resourceVersion, arrival time)

    async def start(self) -> None:
        for i in range(self.n):
            c = Client(f"https://127.0.0.1:{self.port}", self.data_dir)
            self.clients.append(c)
            self.tasks.append(asyncio.create_task(self._watch(c, probe=i == 0)))
        await asyncio.wait_for(self.all_connected.wait(), 120)

    async def _watch(self, c: Client, probe: bool = False) -> None:
        timeout = aiohttp.ClientTimeout()
        path = c.url + "/api/v1/pods?watch=1"
        async with c.session.get(path, headers=c.headers, ssl=c.ssl, timeout=timeout) as resp:
            self.connected += 1
            if self.connected == self.n:
                self.all_connected.set()
            if probe:
                await self._probe(resp)
                return
            async for chunk in resp.content.iter_any():
                self.events += chunk.count(b"\n")

    async def _probe(self, resp: aiohttp.ClientResponse) -> None:
        seen = 0
        while line := await resp.content.readline():
            self.events += 1
            seen += 1
            if seen % PROBE_EVERY == 0 and len(self.probe) < PROBE_MAX and (m := _RV.search(line)):
                self.probe.append((int(m.group(1)), time.time()))

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for c in self.clients:
            await c.close()


async def serve_watchers(n: int, port: int, data_dir: Path) -> None:
    """A fleet in this process; "ready" once connected, then on a line on
    stdin one JSON line with the events received, the CPU seconds this process used and its
    niceness."""
    fleet = Fleet(n, port, data_dir)
    await fleet.start()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    # what the server sent is read to the end before counting (a loaded machine reads late)
    deadline, seen = time.monotonic() + 30, -1
    while fleet.events != seen and time.monotonic() < deadline:
        seen = fleet.events
        await asyncio.sleep(0.5)
    await fleet.stop()
    usage = os.times()
    report = {
        "events": fleet.events,
        "cpu_s": usage.user + usage.system,
        "nice": os.nice(0),
        "probe": fleet.probe,
    }
    print(json.dumps(report), flush=True)


class Watchers:
    """``n`` watchers of every pod in a process of their own, as kubectl or a controller would
    be: their client work does not run on the event loop that creates pods and tracks bindings."""

    def __init__(self, n: int, port: int, nice: int = 0) -> None:
        self.n, self.port, self.nice = n, port, nice
        self.events = 0
        self.cpu_s = 0.0
        self.niceness = 0  # as the watchers' process reported it
        self.probe: list[tuple[int, float]] = []  # (resourceVersion, arrival time) of sampled events
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, settings: Settings) -> None:
        await wait_kube(settings.data_dir)
        if not self.n:
            return
        niced = ("nice", "-n", str(self.nice)) if self.nice else ()
        self.proc = await asyncio.create_subprocess_exec(
            *niced,
            sys.executable,
            "-m",
            "bench.kubeapi_watchers",
            str(self.n),
            "--port",
            str(self.port),
            "--data-dir",
            str(settings.data_dir),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=64 * 1024 * 1024,  # its report line carries the probe's samples
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 120)
        assert line.strip() == b"ready", line

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.stdin is None or proc.stdout is None:
            return
        proc.stdin.write(b"\n")
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if line.strip():
            report = json.loads(line)
            self.events, self.cpu_s, self.niceness = report["events"], report["cpu_s"], report["nice"]
            self.probe = [(int(rv), float(t)) for rv, t in report.get("probe", ())]
        await proc.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kubeapi_watchers", description=__doc__.splitlines()[0])
    p.add_argument("watchers", type=int)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--data-dir", type=Path, required=True)
    args = p.parse_args(argv)
    asyncio.run(serve_watchers(args.watchers, args.port, args.data_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
