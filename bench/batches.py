"""What one append costs nats-server: a single message against JetStream atomic batches.

Starts its own nats-server (JetStream, file storage, R1: the event stream's settings) and appends
``--appends`` times, ``--in-flight`` at a time, in each shape, measuring the server's CPU (from
/proc) and the wall time per append:

* ``single``: one event, with an expectation on its subject (``PodBound``);
* ``batch, one subject``: two events on one subject, one atomic batch (``ClaimAllocated`` +
  ``ClaimReserved``);
* ``batch, two subjects``: one event and a guard message on another subject, one atomic batch
  (an allocation and its ``GuardTaken``).

Why it exists: nats-server stages every atomic batch of a file-backed R1 stream in a file store
of its own, so a batch costs far more than its messages (docs/scheduler-service.md, "The critical
path"). ``--json`` prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from draflow.events.dra import PodBound
from draflow.events.saga import SagaCompleted
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.guard import Guard
from draflow.infra.natsd import LocalNatsServer


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _limited(
    sem: asyncio.Semaphore, append: Callable[[str, str], Awaitable[object]], store: EventStore, name: str
) -> None:
    async with sem:
        await append(store.subject("Pod", "b", name), store.subject("Guard", "b", name))


async def run(appends: int, in_flight: int) -> dict[str, dict[str, float]]:
    tmp = Path(tempfile.mkdtemp(prefix="draflow-batches-"))
    server = LocalNatsServer(tmp / "nats")
    server.start()
    assert server.proc is not None
    settings = Settings(nats_url=server.url, data_dir=tmp / "data", stream="BATCHES", root="batches")
    settings.data_dir.mkdir(parents=True)
    store = await EventStore.open(settings, "bench")
    shapes: dict[str, Callable[[str, str], Awaitable[object]]] = {
        "single": lambda s, g: store.append(s, PodBound(node_name="n"), expected_last_seq=0),
        "batch, one subject": lambda s, g: store.append(
            s, [PodBound(node_name="n"), SagaCompleted()], expected_last_seq=0
        ),
        "batch, two subjects": lambda s, g: store.append(
            s, PodBound(node_name="n"), expected_last_seq=0, guards=[Guard(g, SagaCompleted(), 0)]
        ),
    }
    out: dict[str, dict[str, float]] = {}
    try:
        for n, (shape, append) in enumerate(shapes.items()):
            sem = asyncio.Semaphore(in_flight)
            calls = [_limited(sem, append, store, f"s{n}-{i}") for i in range(appends)]
            cpu0, t0 = _cpu_s(server.proc.pid), time.monotonic()
            await asyncio.gather(*calls)
            took = time.monotonic() - t0
            cpu = _cpu_s(server.proc.pid) - cpu0
            out[shape] = {
                "server_cpu_ms_per_append": round(cpu * 1000 / appends, 3),
                "ms_per_append": round(took * 1000 / appends, 2),
            }
            print(
                f"{shape}: nats-server {out[shape]['server_cpu_ms_per_append']} ms CPU, "
                f"{out[shape]['ms_per_append']} ms wall per append ({in_flight} in flight)"
            )
    finally:
        await store.close()
        server.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.batches", description=__doc__.splitlines()[0])
    p.add_argument("--appends", type=int, default=300)
    p.add_argument("--in-flight", type=int, default=16)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    result = asyncio.run(run(args.appends, args.in_flight))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
