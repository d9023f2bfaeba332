"""Reducers of the node-side pod facts (:mod:`events.node`) in the object fold."""

from __future__ import annotations

from msgspec.structs import replace

from events.api.core_v1 import Pod
from events.node import PodContainerStatusesReported
from projections.objects import reducer

__all__: list[str] = []


@reducer(PodContainerStatusesReported)
def _container_statuses(pod: Pod | None, ev: PodContainerStatusesReported) -> Pod | None:
    if pod is None:
        return None
    status = replace(
        pod.status,
        container_statuses=tuple(ev.container_statuses),
        init_container_statuses=tuple(ev.init_container_statuses),
    )
    return replace(pod, status=status)
