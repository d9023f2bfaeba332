"""bench/churn_memory.py in a tiny shape (a real nats-server and every service as its own process,
one node): it prints the documented ``--json`` keys, and its figures are readings of the live
processes (each process's own RSS, the log's own length), not constants; ``bench.memtrace`` finds
the allocation site that grew."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from bench.churn_memory import CONTROLLERS, heap_mb, parse_args, rss_mb
from bench.memtrace import top_growth
from tests.bench import run_bench

KEYS = {"rss_mb_fresh", "rss_mb_baseline", "rss_mb_after", "rss_ratio", "pods_churned", "stages"}
KEYS |= {"events_in_log", "cpu_ms_per_pod", "max_rss_ratio", "date", "loadavg", "cpus"}
SHAPE = ("--stages", "6,16", "--nodes", "1", "--gpus", "4", "--in-flight", "3", "--event-ttl", "2")


def _bench(*args: str) -> tuple[dict[str, Any], str]:
    return run_bench("bench.churn_memory", *SHAPE, *args)


def test_rss_of_every_process_after_churn_against_the_warmed_baseline() -> None:
    r, out = _bench("--trace-memory", "gpu_driver")
    assert KEYS <= set(r), KEYS - set(r)
    processes = {"apiserver", *CONTROLLERS, "gpu_driver", "kubelet_node_1", "gpu_plugin_node_1"}
    assert set(r["rss_mb_after"]) == processes | {"nats-server"}
    assert r["baseline_pods"] == 6 and r["pods_churned"] == 16
    assert [s["pods"] for s in r["stages"]] == [6, 16]
    # every pod's life is in the log: at least created, claim, scheduled, bound, started, deleted
    first, last = (s["events_in_log"] for s in r["stages"])
    assert first >= 6 * 8 and last - first >= 10 * 8
    for name in processes:
        # a Python service holds tens of MB; the ratio is the two readings'
        assert 15 < r["rss_mb_baseline"][name] < 2000 and 15 < r["rss_mb_after"][name] < 2000, name
        ratio = r["rss_mb_after"][name] / r["rss_mb_baseline"][name]
        assert r["rss_ratio"][name] == pytest.approx(ratio, abs=0.002), name
        assert r["cpu_ms_per_pod"][name] > 0, name
    for stage in r["stages"]:
        for name in processes:  # of the RSS: anonymous memory, of which malloc's brk heap
            assert 0 < stage["rss_heap_mb"][name] < stage["rss_anon_mb"][name] < stage["rss_mb"][name], name
    assert len(set(r["rss_mb_after"].values())) > 3  # readings of different processes, not one value
    assert r["max_rss_ratio"] == max(v for n, v in r["rss_ratio"].items() if n != "nats-server")
    assert r["traced"] == ["gpu_driver"]
    assert "gpu_driver: allocation sites that grew most from the baseline (tracemalloc):" in out


def test_rss_is_this_process_own_reading() -> None:
    before = rss_mb(os.getpid())
    block = bytearray(64 * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])  # touch every page: resident
    assert rss_mb(os.getpid()) - before > 50
    del block
    assert rss_mb(2**22 + 12345) == 0.0  # no such process
    assert 0 < heap_mb(os.getpid()) < rss_mb(os.getpid(), "RssAnon") < rss_mb(os.getpid())


def test_options_are_checked() -> None:
    for bad in (["--stages", "100"], ["--stages", "500,200"], ["--in-flight", "99"], ["--event-ttl", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
    args = parse_args(["--stages", "10,20,30", "--trace-memory", "apiserver, scheduler"])
    assert args.stages == [10, 20, 30] and args.trace_memory == {"apiserver", "scheduler"}


_held: list[bytes] = []


def _grow() -> None:
    _held.extend(b"%d" % i * 50 for i in range(20_000))


def test_top_growth_names_the_site_that_grew(tmp_path: Path) -> None:
    tracemalloc.start(4)
    try:
        tracemalloc.take_snapshot().dump(str(tmp_path / "0.snap"))
        _grow()
        tracemalloc.take_snapshot().dump(str(tmp_path / "1.snap"))
    finally:
        tracemalloc.stop()
        _held.clear()
    lines = top_growth(tmp_path / "0.snap", tmp_path / "1.snap", limit=3)
    assert "test_churn_memory.py" in lines[0] and float(lines[0].split()[0]) > 500, lines
