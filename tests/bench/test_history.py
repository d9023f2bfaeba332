"""bench/history.py at a small size: it builds the log, starts the apiserver as its own process,
prints its figures with the documented ``--json`` keys, live state (the snapshot of the
objects) is the same at every size, and a start from a snapshot folds less than a whole-log
fold; the fast copier of lifecycles makes exactly the copies the plain one does."""

from __future__ import annotations

from typing import Any

from bench.history import DEFAULT_RECORDING
from bench.lifecycles import UnitCopier, copy_unit, load_recording
from tests.bench import run_bench

KEYS = {"max_events", "start_caught_up_s", "rss_mb", "bytes_per_event", "start_slope_us_per_event"}


def _bench(*args: str) -> dict[str, Any]:
    sizes = ("--sizes", "5k,20k", "--services", "apiserver")
    return run_bench("bench.history", *sizes, *args, timeout_s=240)[0]


def test_figures_and_snapshot_start_against_whole_log_fold() -> None:
    with_snapshots = _bench()
    without = _bench("--no-snapshots")
    for result in (with_snapshots, without):
        assert KEYS <= set(result), result
        assert result["max_events"] >= 20_000
        assert [r["events"] for r in result["runs"]] == sorted(r["events"] for r in result["runs"])
        assert set(result["start_caught_up_s"]) == set(result["rss_mb"]) == {"apiserver"}
        assert 0 < result["bytes_per_event"] < 2000
        assert 0 < result["start_cpu_s"]["apiserver"] < 60
        assert set(result["fresh"]) == set(result["rss_vs_fresh"]) == {"apiserver"}
        assert 0.5 < result["rss_vs_fresh"]["apiserver"] < 2
    # live state is bounded: the snapshot of the objects is the same at 5k and at 20k events
    sizes = {r["snapshot_bytes"] for r in with_snapshots["runs"]}
    assert len(sizes) == 1 and 0 not in sizes, with_snapshots["runs"]
    assert with_snapshots["snapshots"] is True and without["snapshots"] is False
    # the fold (the service's own "caught up ... in Xs"): the snapshot at the log's end against
    # every one of the 20k events
    fold = with_snapshots["runs"][-1]["services"]["apiserver"]["fold_s"]
    whole = without["runs"][-1]["services"]["apiserver"]["fold_s"]
    assert fold < whole, (fold, whole)


def test_the_fast_copier_makes_the_same_copies() -> None:
    rec = load_recording(DEFAULT_RECORDING)
    copier = UnitCopier(rec)
    for copy in (0, 1, 77, 123_456):
        base = 1000 + copy * len(rec.unit)
        assert copier.copy(copy, base) == copy_unit(rec, copy, base)
