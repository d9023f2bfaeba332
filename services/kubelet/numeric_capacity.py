"""The kubelet's side of KEP-4381: publishing its node's ``NodeResourceCapacity`` objects.

Each driver's node plugin that reports capacity (``capacity()``, with a ``generation`` that moves
on every change) gets one object ``<node>-<driver>`` with ``nodeName``, ``driverName`` and the
instances as reported. The kubelet never interprets an instance's data (the scheduler's numeric
model does). An object is written only when it differs from the stored one, so a restart or a
repeated pass appends nothing; an empty report deletes the object (the node offers nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api.meta import ObjectMeta
from draflow.services.runtime.controller import Runtime

__all__ = ["CapacitySource", "desired_capacity", "publish_capacity"]

log = logging.getLogger(__name__)


@runtime_checkable
class CapacitySource(Protocol):
    """A node plugin that reports numeric capacity."""

    @property
    def driver_name(self) -> str: ...

    def capacity(self) -> tuple[nv.NodeResourceInstance, ...]: ...


def object_name(node: str, driver: str) -> str:
    return f"{node}-{driver}"


def desired_capacity(node: str, source: CapacitySource) -> nv.NodeResourceCapacity | None:
    instances = source.capacity()
    if not instances:
        return None
    return nv.NodeResourceCapacity(
        metadata=ObjectMeta(name=object_name(node, source.driver_name)),
        node_name=node,
        driver_name=source.driver_name,
        instances=instances,
    )


async def publish_capacity(rt: Runtime, node: str, plugins: Mapping[str, object]) -> None:
    """Bring this node's objects in line with what the plugins report now."""
    for driver, plugin in sorted(plugins.items()):
        if not isinstance(plugin, CapacitySource):
            continue
        name = object_name(node, driver)
        want = desired_capacity(node, plugin)
        have = rt.get(nv.KIND, "", name)
        if want is None:
            if have is not None:
                await rt.delete(nv.KIND, "", name)
            continue
        if isinstance(have, nv.NodeResourceCapacity) and have.instances == want.instances:
            continue
        if not await rt.apply(want):
            log.warning("%s: could not publish NodeResourceCapacity %s", node, name)
