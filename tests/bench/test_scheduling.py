"""bench/scheduling.py end to end in a tiny shape (real nats-server, apiserver, claim controller and
scheduler processes): it prints every documented ``--json`` key, and its figures agree with a
recount of the log, so the benchmark cannot silently measure nothing."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from bench.harness import ProfilerMissing, Services
from bench.scheduling_hops import events_to_deletion, hop_breakdown, path_to_bound
from draflow.infra.config import Settings
from tests.bench import run_bench

KEYS = {
    "steady_state_pods_per_s",
    "steady_empty_pods_per_s",
    "steady_half_pods_per_s",
    "steady_full_pods_per_s",
    "steady_state_p50_ms",
    "steady_state_p99_ms",
    "backlog_pods_per_s",
    "fill_pods_per_s",
    "cpu_ms_per_pod",
    "cpu_ms_per_pod_total",
    "events_per_bound_pod",
    "hops",
    "date",
    "loadavg",
}
SHAPE = ("--nodes", "3", "--devices-per-node", "10", "--in-flight", "2", "--duration", "1.5")


def _bench(*args: str) -> dict[str, Any]:
    return run_bench("bench.scheduling", *SHAPE, *args)[0]


def _consistent(r: dict[str, Any], levels: tuple[str, ...]) -> None:
    absent = {f"steady_{lv}_pods_per_s" for lv in ("empty", "half", "full") if lv not in levels}
    assert KEYS - absent <= set(r), KEYS - absent - set(r)
    assert not absent & set(r)
    # what the live tracker counted in the windows is what the log holds, recounted at the end
    assert r["steady_state_pods"] == r["steady_pods_bound_in_log"] > 0
    assert r["pods_bound_in_log"] == r["pods_created"]  # every pod created was bound, once
    for lv in levels:
        assert r[f"steady_{lv}_pods_per_s"] > 0, lv
    rates = [r[f"steady_{lv}_pods_per_s"] for lv in levels]
    assert r["steady_state_pods_per_s"] == pytest.approx(sum(rates) / len(rates), abs=0.1)
    assert sum(rates) * r["duration_s"] == pytest.approx(r["steady_state_pods"], abs=0.2 * len(levels))
    assert 0 < r["steady_state_p50_ms"] <= r["steady_state_p99_ms"]
    # the path of a pod: created, claim, scheduling, bound, each in the breakdown
    assert any(hop.startswith("PodApplied → ") for hop in r["hops"]), r["hops"]
    assert any(hop.endswith(" → PodBound") for hop in r["hops"]), r["hops"]
    assert r["events_to_bound_per_pod"] >= 5 and r["events_per_bound_pod"] >= r["events_to_bound_per_pod"]
    processes = {"apiserver", "claim_controller", "scheduler", "nats-server"}
    assert processes <= set(r["cpu_ms_per_pod"]) and all(r["cpu_ms_per_pod"][p] > 0 for p in processes)
    total = sum(r["cpu_ms_per_pod"][p] for p in processes)
    assert r["cpu_ms_per_pod_total"] == pytest.approx(total, abs=0.05)
    assert r["sagas_compensated"] == 0


def test_steady_state_backlog_and_fill_through_the_normal_path() -> None:
    r = _bench("--backlog-pods", "4", "--prefill", "pods")
    _consistent(r, ("empty", "half", "full"))
    assert r["backlog_pods_per_s"] > 0 and r["fill_pods_per_s"] > 0
    assert r["fill_pods"] == (30 // 2) + (30 - 2 - 30 // 2)  # half, then all but the in-flight pods'


def test_claims_prefilled_like_upstream_with_a_cel_selector_each_pod_replaced() -> None:
    """Pre-filled claims are allocated on the devices in node order; at full only the in-flight
    pods' devices are left, and the scheduler never hands out a pre-filled one (no compensation,
    no guard conflict)."""
    r = _bench(
        *("--backlog-pods", "0", "--prefill", "claims", "--selector", "cel", "--levels", "half,full"),
        *("--replace", "each"),
    )
    _consistent(r, ("half", "full"))
    assert r["mode"] == "cel" and r["prefill"] == "claims" and r["fill_pods_per_s"] is None
    assert r["replace"] == "each"
    assert r["guard_retries"] == 0


@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed (the [profile] extra)")
def test_profile_writes_a_flame_graph_per_service_and_window(tmp_path: Path) -> None:
    out = tmp_path / "profiles"
    r = _bench("--backlog-pods", "0", "--levels", "empty", "--profile", "--profile-dir", str(out))
    assert r["profile_dir"] == str(out)
    svgs = {p.name: p.read_text() for p in out.glob("*.svg")}
    assert set(svgs) == {"apiserver-empty.svg", "claim_controller-empty.svg", "scheduler-empty.svg"}
    assert all(text.lstrip().startswith("<?xml") and "<svg" in text for text in svgs.values())


def test_profile_without_py_spy_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("shutil.which", lambda *a, **k: None)
    settings = Settings(nats_url="nats://127.0.0.1:1", data_dir=tmp_path)
    with pytest.raises(ProfilerMissing, match=r"pip install 'draflow\[profile\]'"):
        Services(settings, profile_dir=tmp_path / "profiles")


def test_hops_follow_each_pods_own_path() -> None:
    a = [(1, 10.0, "PodApplied"), (3, 10.010, "SagaStarted"), (4, 10.030, "PodBound"), (6, 11.0, "X")]
    b = [(2, 20.0, "PodApplied"), (5, 20.020, "PodBound")]  # another path: its own hop
    hops = hop_breakdown([path_to_bound(a), path_to_bound(b)])
    assert list(hops) == ["PodApplied → SagaStarted", "PodApplied → PodBound", "SagaStarted → PodBound"]
    assert hops["PodApplied → SagaStarted"] == {"p50_ms": 10.0, "p99_ms": 10.0, "n": 1}
    assert hops["SagaStarted → PodBound"]["p50_ms"] == pytest.approx(20.0)
    assert path_to_bound([(1, 1.0, "PodApplied")]) == []
    assert events_to_deletion({"a": a, "b": b}, {"a": 10.5}) == [3]
