"""bench/kubeapi.py: its watchers a process of their own (niced when asked), connected to a real
Kubernetes API before the bench goes on, every event of every watcher counted, and their CPU and
niceness reported; the bench end to end in a tiny shape, in both deployments of the Kubernetes API,
its figures the medians of its rounds; so the watchers-vs-scheduling figures cannot silently
measure nothing."""

from __future__ import annotations

import os
import statistics
from typing import Any

import pytest

from bench.kubeapi import parse_args
from bench.kubeapi_watchers import Watchers
from draflow.infra.config import Settings
from draflow.services.apiserver.kubeapi.auth import load_or_create, write_kubeconfig
from draflow.services.apiserver.kubeapi.server import KubeApi
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient
from tests.bench import run_bench


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "b"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }


async def test_niced_watchers_receive_every_event_and_report_their_cpu(
    apiserver: ApiServer, api: ApiClient, settings: Settings
) -> None:
    creds = load_or_create(settings.data_dir / "kubeapi", "127.0.0.1")
    kube = KubeApi(apiserver, host="127.0.0.1", port=0, credentials=creds)
    await kube.start()
    fleet = Watchers(3, kube.port, nice=19)
    try:
        write_kubeconfig(creds, kube.url, settings.data_dir / "kubeconfig")
        await api.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}}])
        await fleet.start(settings)  # returns once all three are connected
        assert kube.watches.watchers() == 3
        await api.apply([_pod(f"p{i}") for i in range(5)])
        await api.delete([("Pod", "b", "p0")])
    finally:
        await fleet.stop()
        await kube.stop()
    assert fleet.events == 3 * 6  # five ADDED and one DELETED, each to every watcher
    assert fleet.niceness == 19
    # the probe (the first watcher) sampled every fifth event: p4's ADDED, at its resourceVersion
    ((rv, arrived),) = fleet.probe
    p4 = await api.get("Pod", "p4", namespace="b")
    assert rv == int(p4["metadata"]["resourceVersion"]) and arrived > 0
    assert fleet.cpu_s > 0


SMALL = (
    *("--pods", "20", "--repeat", "2", "--watch-events", "5", "--watchers", "3"),
    *("--sched-nodes", "3", "--sched-pods", "8", "--sched-duration", "1"),
)
KEYS = {
    "list_json_ms",
    "list_table_ms",
    "watch_p50_ms",
    "watch_p99_ms",
    "sched_pods_per_s",
    "sched_pods_per_s_with_watchers",
    "fill_pods_per_s",
    "fill_pods_per_s_with_watchers",
    "watchers_slowdown_pct",
    "watchers_fill_slowdown_pct",
    "apiserver_cpu_ms_per_pod",
    "apiserver_cpu_ms_per_pod_with_watchers",
    "kubeapi_cpu_ms_per_pod",
    "watchers_client_cpu_ms_per_pod",
    "watchers_events",
    "watchers_watch_p99_ms",
    "kube_api_in",
    "replica_nice",
    "rounds",
}


def _slower(base: float, loaded: float) -> float:
    return round((base - loaded) / base * 100, 1)


def test_by_default_the_kubernetes_api_is_a_niced_replica_as_the_procfile_runs_it() -> None:
    r, out = run_bench("bench.kubeapi", *SMALL, "--rounds", "1")
    niced = {"sched_pods_per_s_with_niced_watchers", "watchers_niced_slowdown_pct", "watchers_niced_niceness"}
    assert KEYS | niced <= set(r), (KEYS | niced) - set(r)
    assert r["kube_api_in"] == "replica" and r["replica_nice"] == 10
    # niceness adds to the bench's own (this test's, if run under nice), as the kernel caps it
    assert r["replica_niceness"] == min(19, os.nice(0) + 10)
    assert r["watch_events"] == 5 and 0 < r["watch_p50_ms"] <= r["watch_p99_ms"]
    (only,) = r["rounds"]
    assert set(only) == {"alone", "watchers", "niced"}
    # one round: its figures are the result's, and the replica did the serving
    assert r["sched_pods_per_s"] == only["alone"]["steady"] > 0
    assert r["fill_pods_per_s_with_watchers"] == only["watchers"]["fill"] > 0
    assert r["watchers_niced_slowdown_pct"] == _slower(only["alone"]["steady"], only["niced"]["steady"])
    for run in only.values():
        assert run["kubeapi_cpu_ms_per_pod"] > 0 and run["apiserver_cpu_ms_per_pod"] > 0
    assert only["watchers"]["watchers_events"] > 0 and only["niced"]["watchers_niceness"] == 19
    # the probe's deliveries under load were matched with their storage times in the log
    assert 0 < r["watchers_watch_p50_ms"] <= r["watchers_watch_p99_ms"]
    assert "round 1: alone steady" in out and "on a replica at nice 10; median of 1 round" in out


def test_the_kubernetes_api_on_the_apiserver_figures_the_medians_of_the_rounds() -> None:
    """Two rounds (the median of two is their mean; of a count, the lower)."""
    r, out = run_bench(
        "bench.kubeapi", *SMALL, "--kube-api-in", "apiserver", "--watchers-nice", "0", "--rounds", "2"
    )
    assert KEYS <= set(r), KEYS - set(r)
    assert r["kube_api_in"] == "apiserver" and r["replica_nice"] is None
    assert "sched_pods_per_s_with_niced_watchers" not in r
    assert r["kubeapi_cpu_ms_per_pod"] is None  # no replica: the apiserver served the watchers
    assert len(r["rounds"]) == 2 and all(set(x) == {"alone", "watchers"} for x in r["rounds"])
    alone = [x["alone"]["steady"] for x in r["rounds"]]
    loaded = [x["watchers"]["fill"] for x in r["rounds"]]
    assert r["sched_pods_per_s"] == round(statistics.median(alone), 2)  # figures in hundredths
    assert r["fill_pods_per_s_with_watchers"] == round(statistics.median(loaded), 2)
    events = [x["watchers"]["watchers_events"] for x in r["rounds"]]
    assert r["watchers_events"] == statistics.median_low(events) > 0  # a count stays a count
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("round ")] == [
        "round 1",
        "round 2",
    ]


def test_options() -> None:
    assert parse_args([]).kube_api_in == "replica"
    assert parse_args(["--kube-api-in", "apiserver", "--kube-api-replica"]).kube_api_in == "replica"
    assert parse_args([]).rounds == 3 and parse_args([]).replica_nice == 10
    for bad in (["--rounds", "0"], ["--replica-nice", "20"], ["--kube-api-in", "nowhere"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
