"""The kubelet's side of KEP-4381: publishing its node's ``NodeResourceCapacity`` objects.

Each driver whose kubelet plugin streams capacity (``plugins.capacity.CapacityWatcher``) gets one
object ``<node>-<driver>`` with ``nodeName``, ``driverName`` and the instances as last reported.
The kubelet never interprets an instance's data (the scheduler's numeric model does). An object is
written only when it differs from the stored one, so a restart or a repeated report appends
nothing; an empty report deletes the object (the node offers nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api.meta import ObjectMeta
from draflow.services.runtime.controller import Runtime

__all__ = ["desired_capacity", "object_name", "publish"]

log = logging.getLogger(__name__)


def object_name(node: str, driver: str) -> str:
    return f"{node}-{driver}"


def desired_capacity(
    node: str, driver: str, instances: Sequence[nv.NodeResourceInstance]
) -> nv.NodeResourceCapacity | None:
    if not instances:
        return None
    return nv.NodeResourceCapacity(
        metadata=ObjectMeta(name=object_name(node, driver)),
        node_name=node,
        driver_name=driver,
        instances=tuple(instances),
    )


async def publish(rt: Runtime, node: str, driver: str, instances: Sequence[nv.NodeResourceInstance]) -> bool:
    """Bring ``driver``'s object on this node in line with its report; False: not written (the
    apiserver refused or did not answer; the caller tries again)."""
    name = object_name(node, driver)
    want = desired_capacity(node, driver, instances)
    have = rt.get(nv.KIND, "", name)
    if want is None:
        return have is None or await rt.delete(nv.KIND, "", name)
    if isinstance(have, nv.NodeResourceCapacity) and have.instances == want.instances:
        return True
    if not await rt.apply(want):
        log.warning("%s: could not publish NodeResourceCapacity %s", node, name)
        return False
    return True
