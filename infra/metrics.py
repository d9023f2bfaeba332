"""Prometheus metrics every draflow service shares, and the HTTP endpoint that serves them.

Metrics are module-level objects on prometheus-client's default registry, so several services
running in one test process share them without "duplicated timeseries" errors; labels tell the
services apart. A service serves ``/metrics`` on ``--metrics-port PORT``, else
``DRAFLOW_METRICS_PORT``, else the port of its ``DRAFLOW_METRICS_SLOT`` (the Procfile gives each
service a slot N: port 9100+N, plus ``DRAFLOW_PORT_OFFSET`` like every port); with none of them set
it serves none. Names follow the
KEPs where they give one (``resource_controller_create_total``, ``workqueue_depth{name=...}``,
``resourceclaim_controller_creates_total``, ``scheduler_pending_pods``,
``kubelet_pod_resources_endpoint_requests_total``, served by
``services/kubelet/podresources/metrics.py``); the rest are ``draflow_*``.
"""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from time import perf_counter

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server

from draflow.infra.config import flag_from_argv
from draflow.infra.ports import Ports

__all__ = [
    "ALLOCATION_SECONDS",
    "CONSUMER_LAG",
    "EVENTS_CONSUMED",
    "SAGA_OUTCOMES",
    "SAGA_STEPS",
    "SCHEDULER_PENDING_PODS",
    "WORKQUEUE_DEPTH",
    "add_metrics_arg",
    "metrics_port_from_argv",
    "metrics_port_from_env",
    "scrape",
    "serve_metrics",
    "timed",
]

# --- bus and engine ---------------------------------------------------------------------------
EVENTS_CONSUMED = Counter(
    "draflow_events_consumed_total",
    "Events a service's consumer applied (acked).",
    ["service", "consumer"],
)
CONSUMER_LAG = Gauge(
    "draflow_consumer_lag",
    "Events in the stream a service's consumer has not yet applied.",
    ["service", "consumer"],
)
SAGA_OUTCOMES = Counter(
    "draflow_saga_outcomes_total",
    "Sagas that reached a terminal state, by saga type and outcome "
    "(Completed, Compensated, CompensationFailed).",
    ["saga", "outcome"],
)
SAGA_STEPS = Counter(
    "draflow_saga_steps_total",
    "Saga steps and compensations run, by saga type, step and result (ok, failed, retried).",
    ["saga", "step", "result"],
)

# --- controllers (KEP-3063 / KEP-5004 names) ---------------------------------------------------
WORKQUEUE_DEPTH = Gauge(
    "workqueue_depth",
    "Current depth of a controller work queue (KEP-3063: name=\"resource_claim\").",
    ["name"],
)

# --- scheduler ------------------------------------------------------------------------------------
SCHEDULER_PENDING_PODS = Gauge(
    "scheduler_pending_pods",
    "Pods waiting to be scheduled, by queue (active, unschedulable).",
    ["queue"],
)
ALLOCATION_SECONDS = Histogram(
    "draflow_allocation_duration_seconds",
    "Time the structured-parameters allocator spent on one pod's claims.",
    ["result"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)

_lock = threading.Lock()
_served: dict[int, int] = {}  # requested port -> bound port (one endpoint per process and port)


def _port(name: str, raw: str) -> int:
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError(f"{name}: must be a TCP port (0-65535), got {raw}")
    return port


def metrics_port_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """``DRAFLOW_METRICS_PORT``, else the port of ``DRAFLOW_METRICS_SLOT`` (offset by
    ``DRAFLOW_PORT_OFFSET``); ``None`` when neither is set (metrics not served)."""
    env = os.environ if environ is None else environ
    raw = (env.get("DRAFLOW_METRICS_PORT") or "").strip()
    if raw:
        return _port("DRAFLOW_METRICS_PORT", raw)
    slot = (env.get("DRAFLOW_METRICS_SLOT") or "").strip()
    if not slot:
        return None
    if not slot.isdigit():
        raise ValueError(f"DRAFLOW_METRICS_SLOT: expected a number from 1 to 99, got {slot}")
    return Ports.from_env(env).metrics(int(slot))


def add_metrics_arg(parser: argparse.ArgumentParser) -> None:
    """``--metrics-port PORT`` for a service that parses its own arguments (wins over the env)."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus /metrics on 127.0.0.1:PORT (default: $DRAFLOW_METRICS_PORT, else the port of "
        "$DRAFLOW_METRICS_SLOT; unset: off)",
    )


def metrics_port_from_argv(argv: list[str]) -> int | None:
    """``--metrics-port N`` / ``--metrics-port=N`` among a service's arguments (None when absent)."""
    raw = flag_from_argv(argv, "--metrics-port")
    return _port("--metrics-port", raw) if raw else None


def serve_metrics(port: int, host: str = "127.0.0.1") -> int:
    """Serve ``/metrics`` on ``host:port`` in a daemon thread; returns the bound port (0 picks one).

    Idempotent per requested port, so a service restarted in-process does not fail to bind.
    """
    with _lock:
        if port and port in _served:
            return _served[port]
        server, _thread = start_http_server(port, addr=host)
        bound = int(server.server_address[1])
        _served[port or bound] = bound
        return bound


def scrape() -> str:
    """The current exposition text, as ``/metrics`` would return it (for the CLI and tests)."""
    from prometheus_client import generate_latest

    return generate_latest(REGISTRY).decode()


@contextmanager
def timed(histogram: Histogram, **labels: str) -> Iterator[dict[str, str]]:
    """Observe the block's duration; the block may set ``labels["result"]`` before it ends."""
    start = perf_counter()
    out = dict(labels)
    try:
        yield out
    finally:
        histogram.labels(**out).observe(perf_counter() - start)
