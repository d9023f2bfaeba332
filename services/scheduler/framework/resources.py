"""Resource amounts as kube-scheduler counts them: pod requests and node allocatable.

Amounts are integers: ``cpu`` in millicores, everything else in whole units rounded up
(apimachinery's ``MilliValue()`` / ``Value()``), ``pods`` as a count. Only names the scheduler
checks are kept: ``cpu``, ``memory``, ``ephemeral-storage``, ``pods`` and scalar resources
(extended resources such as ``example.com/gpu``, ``hugepages-*``, ``attachable-volumes-*`` and
anything with a ``kubernetes.io/`` prefix), as upstream's ``Resource.Add``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from draflow.events.api.core_v1 import Container, Pod
from draflow.events.quantity import Quantity, QuantityError

__all__ = [
    "CPU",
    "EPHEMERAL_STORAGE",
    "MEMORY",
    "PODS",
    "is_extended_resource",
    "is_scalar_resource",
    "node_allocatable",
    "pod_requests",
    "resource_amounts",
]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

Amounts = dict[str, int]


def is_extended_resource(name: str) -> bool:
    """Upstream ``IsExtendedResourceName``: domain-prefixed, not ``*kubernetes.io/``, not ``requests.*``.

    These are device-plugin resources and (KEP-5004, a later issue) DRA-backed extended resources.
    """
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def is_scalar_resource(name: str) -> bool:
    """Upstream ``IsScalarResourceName``: extended, hugepages, attachable volumes, prefixed native."""
    return "/" in name or name.startswith("hugepages-") or name.startswith("attachable-volumes-")


@lru_cache(maxsize=8192)
def _amount(name: str, value: str | int | float) -> int:
    q = Quantity.parse(value)
    return q.milli_value() if name == CPU else q.value()


def resource_amounts(values: Mapping[str, str | int | float]) -> Amounts:
    """A ResourceList as integers, dropping names the scheduler does not account for.

    Unparseable quantities are dropped too (admission refuses them; the scheduler never crashes
    on a bad object in the log).
    """
    out: Amounts = {}
    for name, value in values.items():
        if name in (CPU, MEMORY, EPHEMERAL_STORAGE, PODS) or is_scalar_resource(name):
            try:
                out[name] = _amount(name, value)
            except QuantityError:
                continue
    return out


def _add(into: Amounts, add: Mapping[str, int]) -> None:
    for name, value in add.items():
        into[name] = into.get(name, 0) + value


def _max(into: Amounts, other: Mapping[str, int]) -> None:
    for name, value in other.items():
        if value > into.get(name, 0):
            into[name] = value


def _container_requests(containers: Iterable[Container]) -> list[tuple[Container, Amounts]]:
    return [(c, resource_amounts(c.resources.requests)) for c in containers]


def pod_requests(pod: Pod) -> Amounts:
    """Upstream ``resourcehelper.PodRequests``: what the pod occupies on a node.

    Sum of the regular containers plus restartable init containers (sidecars, which keep
    running), at least the peak of any regular init container running next to the sidecars
    started before it, pod-level requests (``spec.resources``) overriding cpu/memory/hugepages
    when set, plus ``spec.overhead``. ``pods`` is not included (the fit check counts pods).
    """
    spec = pod.spec
    total: Amounts = {}
    for _, amounts in _container_requests(spec.containers):
        _add(total, amounts)
    sidecars: Amounts = {}
    init_peak: Amounts = {}
    for container, amounts in _container_requests(spec.init_containers):
        if container.restart_policy == "Always":
            _add(total, amounts)
            _add(sidecars, amounts)
            running = dict(sidecars)
        else:
            running = dict(amounts)
            _add(running, sidecars)
        _max(init_peak, running)
    _max(total, init_peak)
    if spec.resources is not None and spec.resources.requests:
        for name, value in resource_amounts(spec.resources.requests).items():
            if name in (CPU, MEMORY) or name.startswith("hugepages-"):
                total[name] = value
    if spec.overhead:
        _add(total, resource_amounts(spec.overhead))
    return {name: value for name, value in total.items() if value}


def node_allocatable(values: Mapping[str, str | int | float]) -> Amounts:
    """Node ``status.allocatable`` as integers (``pods`` included)."""
    return resource_amounts(values)
