"""The PodResources endpoint's Prometheus metrics, named as the kubelet's (``pkg/kubelet/metrics``).

``kubelet_pod_resources_endpoint_requests_total`` (every call) and, per method,
``kubelet_pod_resources_endpoint_requests_{list,get,get_allocatable}`` and
``kubelet_pod_resources_endpoint_errors_{list,get,get_allocatable}``, each with the label
``server_api_version="v1"``. The Go client exposes them under exactly these names; prometheus-client
would append ``_total`` to every counter, so they are served by a collector of our own: the
``_total`` one as a counter, the others (whose upstream names have no ``_total``) untyped with the
exact upstream name. Counts are per process (one kubelet per process in a deployment).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, UnknownMetricFamily
from prometheus_client.registry import Collector

__all__ = ["METHODS", "PREFIX", "count"]

PREFIX = "kubelet_pod_resources_endpoint"
METHODS = ("list", "get", "get_allocatable")
_HELP = {
    "requests": "Number of requests to the PodResource {} endpoint. Broken down by server api version.",
    "errors": "Number of requests to the PodResource {} endpoint which returned error. "
    "Broken down by server api version.",
}
_lock = threading.Lock()
_counts: dict[tuple[str, str, str], int] = {}  # (kind, method, version) -> count


def count(method: str, version: str = "v1", *, error: bool = False) -> None:
    """One call of ``method`` (``list``/``get``/``get_allocatable``); ``error``: it failed."""
    with _lock:
        if error:
            key = ("errors", method, version)
            _counts[key] = _counts.get(key, 0) + 1
        else:
            for key in (("requests", "total", version), ("requests", method, version)):
                _counts[key] = _counts.get(key, 0) + 1


class _PodResourcesCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily | UnknownMetricFamily]:
        with _lock:
            snapshot = dict(_counts)
        total = CounterMetricFamily(
            f"{PREFIX}_requests",
            "Cumulative number of requests to the PodResource endpoint. Broken down by server api version.",
            labels=["server_api_version"],
        )
        for (kind, method, version), value in sorted(snapshot.items()):
            if kind == "requests" and method == "total":
                total.add_metric([version], value)
        yield total
        for kind in ("requests", "errors"):
            for method in METHODS:
                family = UnknownMetricFamily(
                    f"{PREFIX}_{kind}_{method}",
                    _HELP[kind].format(method.replace("_", " ").title().replace(" ", "")),
                    labels=["server_api_version"],
                )
                for (k, m, version), value in sorted(snapshot.items()):
                    if k == kind and m == method:
                        family.add_metric([version], value)
                yield family


REGISTRY.register(_PodResourcesCollector())
