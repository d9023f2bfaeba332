"""When the kubelet tries again to start a pod it could not prepare (issue 23 item 1, pure)."""

from __future__ import annotations

from draflow.services.kubelet.backoff import DEFAULT_MAX_S, PrepareBackoff, retry_delay
from draflow.services.kubelet.manager import DRAManager
from draflow.services.kubelet.sync import Step, next_step
from tests.builders import make_pod


def test_delay_doubles_up_to_upstreams_backoff_period() -> None:
    assert [retry_delay(n) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert DEFAULT_MAX_S == 10.0  # kubelet's pod worker backOffPeriod
    assert retry_delay(0) == 0.0
    assert retry_delay(3, base_s=0.05, max_s=0.15) == 0.15


def test_backoff_per_pod() -> None:
    b = PrepareBackoff()
    assert b.due("a", 0.0) and b.failures("a") == 0
    assert b.failed("a", 100.0) == 0.5
    assert not b.due("a", 100.4) and b.due("a", 100.5)
    assert b.due("b", 100.0)  # other pods are not held back
    assert b.failed("a", 101.0) == 1.0 and b.failures("a") == 2
    b.forget("a")
    assert b.due("a", 101.0) and b.failures("a") == 0


def test_a_pod_that_could_not_start_is_still_started_never_failed() -> None:
    """The step for a bound Pending pod is START however often it failed: the kubelet keeps
    trying (upstream: the pod worker retries SyncPod), it never turns a refusal into Failed."""
    pod = make_pod("p", node_name="node-1")
    manager = DRAManager()
    assert next_step(pod, "node-1", manager) is Step.START
