"""Peak memory and time of ``draflow verify-replay`` and ``draflow export`` over a long log.

Builds a log of realistic churn with ``bench.history``'s builder (recorded pod lifecycles, each
torn down again: nothing is left at the end), then runs each tool as its own process and reports
its peak resident memory (``ru_maxrss`` of that process, from ``wait4``) and its wall seconds.
(``verify-replay`` folds the whole log and checks the last event only: the copies' generated
claim names do not follow from their fresh uids). Both tools should run in memory bounded by
the live state, not by the log's length.

``python -m bench.tools_memory [--size 300k] [--recording FILE] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import service_env
from bench.history import DEFAULT_RECORDING, ROOT, grow, load_recording, parse_size
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.natsd import LocalNatsServer

TOOLS = {
    # folds the whole log, checks from the last event: a full check stops at the first copy
    "verify_replay": ["verify-replay", "--from-seq", "{check_from}"],
    "export": ["export", "-o", "{out}"],
}


def run_tool(argv: list[str], settings: Settings, code: Path = ROOT) -> tuple[float, float, int]:
    """(peak RSS in MB, seconds, exit code) of ``draflow <argv>`` run to its end, with the
    checkout ``code`` (another one, e.g. an older commit's, measures that code's tools)."""
    env = service_env(settings)
    if code != ROOT:
        env["PYTHONPATH"] = str(code)
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "draflow.services.cli", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=code,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss / 1024, time.monotonic() - began, proc.returncode


async def build(settings: Settings, size: int, recording: Path) -> int:
    store = await EventStore.open(settings, "bench-tools")
    try:
        return await grow(store, load_recording(recording), size)
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="300k", help="log length in events (k, M suffixes)")
    parser.add_argument("--recording", default=str(DEFAULT_RECORDING), help="a `draflow export` file")
    parser.add_argument(
        "--code",
        action="append",
        default=[],
        help="also run the tools of this checkout (e.g. `git worktree add` of an older commit)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="draflow-tools-"))
    server = LocalNatsServer(work / "nats")
    server.start()
    settings = Settings(nats_url=server.url, data_dir=work / "data", stream="HISTORY", root="hist")
    result: dict[str, Any] = {"tools": {}}
    try:
        began = time.monotonic()
        events = asyncio.run(build(settings, parse_size(args.size), Path(args.recording)))
        print(f"log of {events} events built in {time.monotonic() - began:.1f}s")
        result["events"] = events
        for checkout in [ROOT, *(Path(c).resolve() for c in args.code)]:
            figures: dict[str, Any] = {}
            for name, tool in TOOLS.items():
                argv_ = [a.format(out=work / "export.jsonl", check_from=events) for a in tool]
                rss, seconds, code = run_tool(argv_, settings, checkout)
                figures[name] = {"peak_rss_mb": round(rss, 1), "seconds": round(seconds, 2), "exit": code}
                print(f"  {checkout}: draflow {tool[0]}: peak RSS {rss:.0f} MB, {seconds:.1f}s, exit {code}")
            result["tools" if checkout == ROOT else "other"] = figures
    finally:
        server.stop()
    result["machine"] = f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    result["date"] = time.strftime("%Y-%m-%d")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
