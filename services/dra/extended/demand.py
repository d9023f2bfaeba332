"""A pod's extended-resource demand, counted as kube-scheduler and quota count it.

``container_requests`` reads one container (requests, falling back to limits as the API server's
defaulting does, so undefaulted manifests give the same answer). ``pod_requests`` is
component-helpers' ``PodRequests`` restricted to extended resources: the sum over regular
containers and restartable (sidecar) init containers, or the largest init-container moment if
bigger — an init container runs alongside the sidecars started before it.
"""

from __future__ import annotations

from collections.abc import Mapping

from events.api.core_v1 import Container, Pod
from events.quantity import Quantity, QuantityError
from services.dra.extended.names import is_dra_extended_resource_name

__all__ = ["all_containers", "container_requests", "is_sidecar", "pod_requests", "whole"]


def whole(value: str | int | float) -> int | None:
    """The integer value of a quantity, None when it is not a whole number or unparsable.

    Extended resources cannot be fractional (API validation); upstream's ``AsInt64`` refuses
    the rest, so they are ignored here too.
    """
    try:
        q = Quantity.parse(value)
    except QuantityError:
        return None
    if not q.is_integer():
        return None
    return q.as_int()


def container_requests(c: Container) -> dict[str, str | int | float]:
    """The container's requests with limits filling missing names (API defaulting)."""
    out: dict[str, str | int | float] = dict(c.resources.limits)
    out.update(c.resources.requests)
    return out


def all_containers(pod: Pod) -> tuple[Container, ...]:
    """Init containers then regular containers: the index space of ``container-<i>-request-<j>``."""
    return pod.spec.init_containers + pod.spec.containers


def is_sidecar(c: Container) -> bool:
    return c.restart_policy == "Always"


def _extended(c: Container) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in container_requests(c).items():
        if not is_dra_extended_resource_name(name):
            continue
        n = whole(value)
        if n is not None:
            out[name] = n
    return out


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def _max(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        if v > into.get(k, 0):
            into[k] = v


def pod_requests(pod: Pod) -> dict[str, int]:
    """Extended resources the pod needs at its peak (name → whole units; zeros kept)."""
    total: dict[str, int] = {}
    for c in pod.spec.containers:
        _add(total, _extended(c))
    sidecars: dict[str, int] = {}
    peak_init: dict[str, int] = {}
    for c in pod.spec.init_containers:
        reqs = _extended(c)
        if is_sidecar(c):
            _add(total, reqs)
            _add(sidecars, reqs)
            moment = dict(sidecars)
        else:
            moment = dict(reqs)
            _add(moment, sidecars)
        _max(peak_init, moment)
    _max(total, peak_init)
    return dict(sorted(total.items()))
