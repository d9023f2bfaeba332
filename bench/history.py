"""What a long history costs: start-to-caught-up, memory and bytes per event against log length.

Builds logs of realistic churn without running the system for hours (``bench/lifecycles.py``): a
recorded log (a ``draflow export`` of real services; by default the golden log
``tests/data/golden/basic-claim-template.jsonl``, which ``tests.events.make_golden`` records from
the real apiserver, claim controller, scheduler, driver and kubelet) is split into its cluster
set-up and one *lifecycle unit* (a namespace, a claim template, pods, claims, scheduling sagas,
Kubernetes Events, all torn down again). The set-up is stored once, then the unit again and
again, each copy with its own namespace, fresh uids and event ids and its versions moved by the
copy's offset in the log, so every copy is the same lifecycle at another place in the log. The
unit's Events go with its namespace as today's apiserver deletes them (the recording predates
that; the deletions are added as its namespace controller writes them), so the log leaves no live
object of a finished lifecycle: live state is the same at every size. Copies are published
without waiting for each acknowledgement (a bulk load, the stored headers as the services write
them).

For each size (ascending, the same log grown), it reports the stream's bytes on disk per event
(``du`` of the stream's files; JetStream compresses a message block once it is full, 8 MB, so the
block being written is plain), then starts each service as its own process (``python -m
draflow.services.<name>``) and measures the seconds from spawn to its ``caught up with the log``
line or, for the scheduler and the apiserver, to the later line saying it decides (the scheduler
first finishes the sagas earlier instances left unfinished, which it finds among every saga in
the log), the CPU seconds it used by then (less sensitive to a loaded machine) and its resident
memory (``VmRSS``) then; and the slope of start time against log length.
While the log grows, every ``--snapshot-step`` events (default 250k) and at each size's end, the
apiserver is run until it has written a snapshot of the object fold at the log's end (a running
system keeps one, every 20k events; no writer has to fold more than a step, well within the
apiserver's own 120 s start limit), so the starts measured load it and fold only the tail; and
the scheduler is started once, which stores the set of unfinished sagas a start finds (written at
each scheduler start, so this is a scheduler restarted every step); ``--no-snapshots`` measures
whole-log folds instead.

``python -m bench.history [--sizes 100k,1M,10M] [--services apiserver,scheduler,claim_controller]
[--recording FILE] [--no-snapshots] [--snapshot-step 250k] [--json]``; ``--json`` prints one JSON
object as the last line (``max_events``, ``start_caught_up_s``, ``start_cpu_s``, ``rss_mb``,
``bytes_per_event``, ``start_slope_us_per_event``, per size figures under ``runs``, with
``snapshot_bytes``: the size of the apiserver's snapshot of the live objects at that size;
``fresh``: the same starts on the set-up alone, before any history, and ``rss_vs_fresh``: RSS at
the largest log over RSS then; ``start_cpu_slope_us_per_event``: the CPU a start uses per event of
history, which a loaded machine does not stretch as it stretches wall time).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import ROOT, report, service_env
from bench.lifecycles import DEFAULT_RECORDING, Message, Recording, UnitCopier, load_recording
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.natsd import LocalNatsServer, stream_disk_bytes

SERVICES = ("apiserver", "scheduler", "claim_controller", "quota_reconciler")
CAUGHT_UP = re.compile(r"caught up with the log at (\d+) in ([0-9.]+)s")


def parse_size(text: str) -> int:
    text = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * mult)


def _payload(m: Message, root: str) -> bytes:
    return m.payload.replace("{root}", root, 1).encode()  # the envelope's subject


async def grow(store: EventStore, rec: Recording, target: int) -> int:
    """Append copies of the unit until the log holds at least ``target`` events; its length."""
    js = store.js
    stored = (await js.stream_info(store.stream)).state.last_seq
    root = store.root
    if stored == 0:
        for m in rec.setup:
            await js.publish(m.subject.format(root=root), _payload(m, root), headers=m.headers)
        stored = len(rec.setup)
    published = stored
    copy = (stored - len(rec.setup)) // len(rec.unit)
    copier = UnitCopier(rec)
    began, told = time.monotonic(), published
    while published < target:
        for m in copier.copy(copy, published + 1):
            await store.nc.publish(m.subject.format(root=root), _payload(m, root), headers=m.headers)
        published += len(rec.unit)
        copy += 1
        if copy % 200 == 0:
            await store.nc.flush()
            # keep the server's backlog bounded: wait while it is more than ~100k events behind
            await wait_stored(store, published - 100_000)
        if published - told >= 1_000_000:  # a long build says how far it is
            told = published
            rate = (published - stored) / (time.monotonic() - began)
            print(f"  ... {published} events ({rate:,.0f} events/s)", flush=True)
    await store.nc.flush()
    await wait_stored(store, published)
    return published


async def stored_events(store: EventStore) -> int:
    return int((await store.js.stream_info(store.stream)).state.last_seq)


async def wait_stored(store: EventStore, seq: int, stall_s: float = 60.0) -> None:
    """Return once the stream holds ``seq`` events (polled: the server has no event to wait on).

    The copies are published without waiting for acknowledgements, so a refused one (the
    namespace drain's deletions carry the version they expect) shows as a stream that stops
    growing short of ``seq``: that ends the run with the position, not a wait forever."""
    delay, last, since = 0.01, -1, time.monotonic()
    while (stored := (await store.js.stream_info(store.stream)).state.last_seq) < seq:
        if stored != last:
            last, since = stored, time.monotonic()
        elif time.monotonic() - since > stall_s:
            raise SystemExit(f"the log stopped at {stored} of {seq} events: a copied event was refused")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.2)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used (less sensitive to a loaded machine than
    wall time)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Start:
    service: str
    caught_up_s: float  # spawn -> "caught up" line, or its readiness line when later (READY)
    fold_s: float  # what the service itself reports for its fold
    position: int
    rss_mb: float
    cpu_s: float  # CPU seconds spawn -> caught up
    snapshot_bytes: int = 0  # the snapshot written (``until=SNAPSHOT_WRITTEN``): live state's size


SNAPSHOT_WRITTEN = re.compile(r"snapshot objects at (\d+) written \((\d+) bytes")


# Services that say on stdout when they decide (the scheduler after finishing what earlier
# instances left: its unfinished sagas; the apiserver once it serves): their start ends there,
# not at the fold's "caught up". The claim controller and the quota reconciler say it only once
# an apiserver answers, which the bench does not run.
READY = {
    "scheduler": re.compile(r"scheduling from"),
    "apiserver": re.compile(r"apiserver: serving"),
}


def start_service(
    service: str,
    settings: Settings,
    data_dir: Path,
    timeout_s: float,
    *,
    snapshots: bool = True,
    until: re.Pattern[str] = CAUGHT_UP,
    extra_env: dict[str, str] | None = None,
) -> Start:
    """Spawn the service, wait for its caught-up line (or ``until``) and, with ``until`` left
    alone, its readiness line (``READY``), read its RSS and CPU then, stop it."""
    env = service_env(settings, log_level="INFO", DRAFLOW_DATA_DIR=str(data_dir))
    env.pop("DRAFLOW_METRICS_PORT", None)
    env.update(extra_env or {})
    if not snapshots:  # the whole log folded, as before snapshots
        env.update(DRAFLOW_SNAPSHOT_LOAD="0", DRAFLOW_SNAPSHOT_EVERY_EVENTS="0", DRAFLOW_SNAPSHOT_EVERY_S="0")
    ready = READY.get(service) if until is CAUGHT_UP else None
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", f"draflow.services.{service}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    found: list[tuple[float, re.Match[str]]] = []
    ready_at: list[float] = []
    tail: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line)
            del tail[:-20]
            if not found and (m := until.search(line)):
                found.append((time.monotonic(), m))

    def read_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if ready is not None and not ready_at and ready.search(line):
                ready_at.append(time.monotonic())

    readers = [threading.Thread(target=f, daemon=True) for f in (read_stderr, read_stdout)]
    for reader in readers:
        reader.start()
    try:
        deadline = began + timeout_s
        while not found or (ready is not None and not ready_at):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{service} did not catch up:\n{''.join(tail)}")
            time.sleep(0.01)
        at, m = found[0]
        at = max([at, *ready_at])
        fold_s = float(m.group(2)) if m.re is CAUGHT_UP else 0.0
        size = int(m.group(2)) if m.re is SNAPSHOT_WRITTEN else 0
        return Start(service, at - began, fold_s, int(m.group(1)), rss_mb(proc.pid), cpu_s(proc.pid), size)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for reader in readers:
            reader.join(2)


def slope_us(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of seconds against events, in µs per event (0 with fewer than 2 sizes)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    return sxy / sxx * 1e6 if sxx else 0.0


def measure(
    services: list[str], settings: Settings, work: Path, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    """Start each service on the log as it is now: its figures."""
    out: dict[str, dict[str, float]] = {}
    for service in services:
        data_dir = work / "data" / service
        try:
            start = start_service(service, settings, data_dir, args.timeout, snapshots=args.snapshots)
        except SystemExit as exc:  # e.g. a request to a server busy with a 10M-event stream timed out
            print(f"  {service} failed to start ({str(exc).splitlines()[-1]}); once more", flush=True)
            time.sleep(5)
            start = start_service(service, settings, data_dir, args.timeout, snapshots=args.snapshots)
        out[service] = {
            "caught_up_s": round(start.caught_up_s, 3),
            "fold_s": round(start.fold_s, 3),
            "rss_mb": round(start.rss_mb, 1),
            "cpu_s": round(start.cpu_s, 2),
        }
        print(
            f"  {service:17s} start→caught up {start.caught_up_s:6.2f}s "
            f"(fold {start.fold_s:.2f}s at {start.position}), {start.cpu_s:.2f}s of CPU, "
            f"RSS {start.rss_mb:.0f} MB",
            flush=True,
        )
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rec = load_recording(Path(args.recording))
    sizes = sorted(parse_size(s) for s in args.sizes.split(","))
    services = [s.strip() for s in args.services.split(",") if s.strip()]
    work = Path(tempfile.mkdtemp(prefix="draflow-history-"))
    server = LocalNatsServer(work / "nats")
    server.start()
    settings = Settings(nats_url=server.url, data_dir=work / "data", stream="HISTORY", root="hist")
    runs: list[dict[str, Any]] = []
    try:
        store = await EventStore.open(settings, "bench-history")
        try:
            # a fresh start: the cluster's set-up only, no history (what "after churn" compares to)
            setup = await grow(store, rec, 0)
            print(f"fresh log of {setup} events (the set-up):", flush=True)
            fresh = measure(services, settings, work, args)
            for size in sizes:
                built_s = 0.0  # appending only (the snapshots written on the way are not counted)
                snapshot_bytes = 0
                events = await stored_events(store)
                while events < size:
                    # a running system keeps its snapshot current (every 20k events): the bench
                    # writes one every --snapshot-step events, so no writer folds more than that
                    step = size if not args.snapshots else min(size, events + args.snapshot_step)
                    began = time.monotonic()
                    events = await grow(store, rec, step)
                    built_s += time.monotonic() - began
                    if args.snapshots:
                        wrote = start_service(
                            "apiserver",
                            settings,
                            work / "data" / "w",
                            args.timeout,
                            until=SNAPSHOT_WRITTEN,
                            extra_env={"DRAFLOW_SNAPSHOT_EVERY_EVENTS": "1"},  # at once, whatever the size
                        )
                        snapshot_bytes = wrote.snapshot_bytes
                        if "scheduler" in services:
                            # its start stores the unfinished sagas it found (sagas/pending.py): a
                            # scheduler restarted every step reads at most a step of saga events
                            start_service("scheduler", settings, work / "data" / "w", args.timeout)
                        print(
                            f"  snapshot of the objects at {wrote.position} written by the apiserver "
                            f"({snapshot_bytes} bytes: the live objects)",
                            flush=True,
                        )
                disk = stream_disk_bytes(server.store_dir, settings.stream)
                run_: dict[str, Any] = {
                    "events": events,
                    "build_s": round(built_s, 2),
                    "disk_bytes": disk,
                    "bytes_per_event": round(disk / events, 1),
                    "snapshot_bytes": snapshot_bytes,
                }
                print(
                    f"log of {events} events ({len(rec.unit)}-event lifecycles) built in {built_s:.1f}s: "
                    f"{disk / 1e6:.1f} MB on disk, {disk / events:.0f} bytes/event",
                    flush=True,
                )
                run_["services"] = measure(services, settings, work, args)
                runs.append(run_)
        finally:
            await store.close()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)  # the log (gigabytes at 10M) and the services' dirs
    last = runs[-1]
    slopes = {
        s: round(slope_us([(r["events"], r["services"][s]["caught_up_s"]) for r in runs]), 3)
        for s in services
    }
    # MiB per event, times 2^20: bytes of resident memory per event of history
    rss_slopes = {
        s: round(slope_us([(r["events"], r["services"][s]["rss_mb"]) for r in runs]) * 1.048576, 1)
        for s in services
    }
    cpu_slopes = {
        s: round(slope_us([(r["events"], r["services"][s]["cpu_s"]) for r in runs]), 4) for s in services
    }
    # resident memory at the largest log against a start on the set-up alone (1.0: the same)
    rss_vs_fresh = {s: round(last["services"][s]["rss_mb"] / fresh[s]["rss_mb"], 3) for s in services}
    for s in services:
        print(
            f"{s:17s} slope: {slopes[s]:.2f} µs/event of start, {cpu_slopes[s]:.3f} µs of CPU/event, "
            f"{rss_slopes[s]:.0f} bytes of RSS/event; RSS {rss_vs_fresh[s]:.2f} times a fresh start"
        )
    return {
        "max_events": last["events"],
        "start_caught_up_s": {s: last["services"][s]["caught_up_s"] for s in services},
        "rss_mb": {s: last["services"][s]["rss_mb"] for s in services},
        "start_cpu_s": {s: last["services"][s]["cpu_s"] for s in services},
        "bytes_per_event": last["bytes_per_event"],
        "start_slope_us_per_event": slopes,
        "rss_slope_bytes_per_event": rss_slopes,
        "start_cpu_slope_us_per_event": cpu_slopes,
        "rss_vs_fresh": rss_vs_fresh,
        "fresh": fresh,
        "runs": runs,
        "snapshots": args.snapshots,
        "machine": f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "date": time.strftime("%Y-%m-%d"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100k,1M,10M", help="log lengths in events (k, M suffixes)")
    parser.add_argument("--services", default=",".join(SERVICES[:3]), help=f"of {', '.join(SERVICES)}")
    parser.add_argument("--recording", default=str(DEFAULT_RECORDING), help="a `draflow export` file")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a service may take to start")
    parser.add_argument(
        "--no-snapshots",
        dest="snapshots",
        action="store_false",
        help="services fold the whole log (no snapshot loaded or written): the figures before snapshots",
    )
    parser.add_argument(
        "--snapshot-step",
        type=parse_size,
        default=250_000,
        help="while building, a snapshot is written every this many events (as a running system keeps one)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    return report(run(args), as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
