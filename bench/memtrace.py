"""Run a service with ``tracemalloc`` on, dumping a snapshot on SIGUSR2, to find what holds memory.

``python -m bench.memtrace OUT_DIR MODULE [ARGS...]`` runs ``python -m MODULE ARGS...`` in this
process (same pid, so CPU and RSS are read as for the plain service) with tracemalloc tracing
``DRAFLOW_MEMTRACE_FRAMES`` frames (default 8); each SIGUSR2 writes ``OUT_DIR/<n>.snap``.
``bench.churn_memory --trace-memory`` uses it and compares the last snapshot with the warmed one
(:func:`top_growth`). Tracing costs CPU and memory of its own: a traced process's RSS is not a
figure to report.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType

import draflow

PACKAGE = str(Path(draflow.__file__).resolve().parent)

__all__ = ["top_growth"]


def top_growth(before: Path, after: Path, limit: int = 15) -> list[str]:
    """The allocation sites that grew most from ``before`` to ``after`` (two dumped snapshots),
    one line each with its growth in KB and in blocks, and the innermost draflow frame."""
    old = tracemalloc.Snapshot.load(str(before))
    new = tracemalloc.Snapshot.load(str(after))
    lines = []
    for stat in new.compare_to(old, "traceback")[:limit]:
        frames = [f for f in stat.traceback if f.filename.startswith(PACKAGE)] or list(stat.traceback)
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(frames[-4:]))
        lines.append(f"{stat.size_diff / 1024:+10.1f} KB {stat.count_diff:+8d} blocks  {where}")
    return lines


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(int(os.environ.get("DRAFLOW_MEMTRACE_FRAMES", "8")))
    taken = 0

    def dump(signum: int, frame: FrameType | None) -> None:
        nonlocal taken
        snap = tracemalloc.take_snapshot().filter_traces(
            (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen *>"))
        )
        tmp = out / f"{taken}.snap.tmp"
        snap.dump(str(tmp))
        tmp.rename(out / f"{taken}.snap")  # a reader never sees half a snapshot
        taken += 1

    signal.signal(signal.SIGUSR2, dump)
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
