"""Device health as the kubelet keeps it and shows it in pod status (KEP-4680 for DRA; no I/O).

``HealthCache``: per driver, the health of each ``(pool, device)`` its plugin last reported on
its ``NodeWatchResources`` stream (a complete list each time, so a device left out is Unknown
again); a driver whose stream ends is cleared (all Unknown). Only drivers that ever reported are
shown in pods (``reporting``): a driver without the health service leaves pod status alone.

``allocated_resources_status``: upstream's ``UpdateAllocatedResourcesStatus`` — per container (not
init containers), for each claim entry in its ``resources.claims``, a ``ResourceStatus`` named
``claim:<pod claim name>`` (``claim:<name>/<request>`` with a request) listing every device of the
claim as ``{"resourceID": <its first CDI id, else driver/pool/device>, "health": Healthy |
Unhealthy | Unknown}``; what ``with_resource_statuses`` writes into the containers' statuses as
``allocatedResourcesStatus``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from draflow.events.api.core_v1 import Pod
from draflow.services.kubelet.state import ClaimInfo

__all__ = [
    "HEALTHY",
    "UNHEALTHY",
    "UNKNOWN",
    "HealthCache",
    "allocated_resources_status",
    "health_statuses",
    "with_resource_statuses",
]

HEALTHY, UNHEALTHY, UNKNOWN = "Healthy", "Unhealthy", "Unknown"
KEY = "allocatedResourcesStatus"

Device = tuple[str, str]  # (pool, device)


class HealthCache:
    def __init__(self) -> None:
        self._health: dict[str, dict[Device, str]] = {}
        self.reporting: set[str] = set()

    def get(self, driver: str, pool: str, device: str) -> str:
        return self._health.get(driver, {}).get((pool, device), UNKNOWN)

    def update(self, driver: str, devices: Iterable[tuple[str, str, str]]) -> set[Device]:
        """The driver's complete list ``(pool, device, health)``; returns the devices whose health
        changed (a device no longer listed is Unknown again)."""
        self.reporting.add(driver)
        old = self._health.get(driver, {})
        new = {(pool, device): health for pool, device, health in devices if health != UNKNOWN}
        self._health[driver] = new
        return {d for d in old.keys() | new.keys() if old.get(d, UNKNOWN) != new.get(d, UNKNOWN)}

    def clear(self, driver: str) -> set[Device]:
        """The driver's stream ended: every device Unknown; returns the devices that changed."""
        return self.update(driver, ()) if driver in self.reporting else set()


def _resource_id(driver: str, pool: str, device: str, cdi_ids: tuple[str, ...]) -> str:
    return cdi_ids[0] if cdi_ids else f"{driver}/{pool}/{device}"


def allocated_resources_status(
    pod: Pod, claim_info: Callable[[str, str], ClaimInfo | None], cache: HealthCache
) -> dict[str, list[dict[str, Any]]]:
    """Container name -> its ``allocatedResourcesStatus`` (only containers with some entry)."""
    statuses = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses}
    names = {c.name: c.resource_claim_name or statuses.get(c.name) for c in pod.spec.resource_claims}
    out: dict[str, list[dict[str, Any]]] = {}
    for container in pod.spec.containers:
        entries: dict[str, dict[str, Any]] = {}
        for ref in container.resources.claims:
            claim_name = names.get(ref.name)
            info = claim_info(pod.metadata.namespace, claim_name) if claim_name else None
            if info is None:
                continue
            resources = [
                {
                    "resourceID": _resource_id(driver, d.pool_name, d.device_name, d.cdi_device_ids),
                    "health": cache.get(driver, d.pool_name, d.device_name),
                }
                for driver in sorted(info.driver_state)
                if driver in cache.reporting
                for d in info.driver_state[driver]
            ]
            if resources:
                name = f"claim:{ref.name}/{ref.request}" if ref.request else f"claim:{ref.name}"
                entries[name] = {"name": name, "resources": resources}
        if entries:
            out[container.name] = [entries[n] for n in sorted(entries)]
    return out


def with_resource_statuses(
    container_statuses: Iterable[dict[str, Any]], per_container: dict[str, list[dict[str, Any]]]
) -> tuple[dict[str, Any], ...]:
    """The containers' statuses with ``allocatedResourcesStatus`` set (or removed) from
    ``per_container``."""
    out = []
    for status in container_statuses:
        updated = {k: v for k, v in status.items() if k != KEY}
        found = per_container.get(status.get("name", ""))
        if found:
            updated[KEY] = found
        out.append(updated)
    return tuple(out)


def health_statuses(
    pod: Pod, claim_info: Callable[[str, str], ClaimInfo | None], cache: HealthCache
) -> tuple[dict[str, Any], ...] | None:
    """The pod's container statuses with ``allocatedResourcesStatus`` as they should be now; None
    when they already are."""
    current = tuple(pod.status.container_statuses)
    updated = with_resource_statuses(current, allocated_resources_status(pod, claim_info, cache))
    return None if updated == current else updated
