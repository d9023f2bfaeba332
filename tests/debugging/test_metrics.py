"""Each service serves Prometheus metrics: the real scheduler process is scraped over HTTP."""

from __future__ import annotations

import re
import time
import urllib.request

from events.api.codec import encode_object
from infra.config import Settings
from services.runtime.client import ApiClient
from tests.e2e.procs import Proc
from tests.helpers import assert_eventually
from tests.scheduler.builders import make_node, make_pod

_SERVING = re.compile(r"Prometheus metrics on http://127\.0\.0\.1:(\d+)/metrics")


def _metrics_url(proc: Proc, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in list(proc.stderr):
            if m := _SERVING.search(line):
                return f"http://127.0.0.1:{m.group(1)}/metrics"
        time.sleep(0.05)
    raise AssertionError("no metrics endpoint announced; stderr:\n" + "\n".join(proc.stderr[-20:]))


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


async def test_scheduler_serves_saga_queue_allocation_and_consumer_metrics(
    api: ApiClient, settings: Settings
) -> None:
    nodes = [make_node(f"node-{i}") for i in range(2)]
    pods = [make_pod(f"web-{i}", cpu="1") for i in range(3)]
    results = await api.apply([encode_object(o) for o in (*nodes, *pods)])
    assert not [r.error for r in results if r.error is not None]
    proc = Proc(settings, "services.scheduler", ["--metrics-port", "0"])
    try:
        url = _metrics_url(proc)

        def scraped() -> dict[str, float]:
            m = _scrape(url)
            assert m.get('draflow_saga_outcomes_total{outcome="Completed",saga="PodScheduling"}') == 3, m
            assert m.get('scheduler_pending_pods{queue="active"}') == 0, m  # sampled at most twice a second
            return m

        m = await assert_eventually(scraped, timeout_s=30)
        assert m['draflow_allocation_duration_seconds_count{result="scheduled"}'] == 3
        assert m['draflow_saga_steps_total{result="ok",saga="PodScheduling",step="step bind"}'] == 3
        consumed = m['draflow_events_consumed_total{consumer="all",service="scheduler"}']
        assert consumed >= len(nodes) + len(pods) + 3  # every event it folded, its own PodBound too
        assert m['draflow_consumer_lag{consumer="all",service="scheduler"}'] == 0
    finally:
        proc.terminate()


def test_services_with_their_own_arguments_take_metrics_port_too(settings: Settings) -> None:
    """The kubelet parses its own arguments: ``--metrics-port`` is one of them."""
    proc = Proc(settings, "services.kubelet", ["--node", "node-m", "--gpus", "0", "--metrics-port", "0"])
    try:
        url = _metrics_url(proc)
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        assert "# TYPE draflow_events_consumed_total counter" in text
        assert "# TYPE scheduler_pending_pods gauge" in text
    finally:
        proc.terminate()
