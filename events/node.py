"""Node-side facts about pods that ``events.dra`` does not cover: what the kubelet saw of the containers.

``PodContainerStatusesReported`` carries ``status.containerStatuses`` /
``status.initContainerStatuses`` as the kubelet (or, for a simulated Job pod that finished, the
workloads controller) observed them — the per-container part of a pod's status, which
``PodStarted`` / ``PodSucceeded`` leave alone. Appended in the same atomic batch as the phase fact it
belongs to. Reducer: :mod:`projections.node`.
"""

from __future__ import annotations

from typing import Any

from events.envelope import Event

__all__ = ["PodContainerStatusesReported"]


class PodContainerStatusesReported(Event, frozen=True, kw_only=True):
    """The containers' statuses (core/v1 ContainerStatus objects as JSON), replacing the old ones."""

    container_statuses: tuple[dict[str, Any], ...] = ()
    init_container_statuses: tuple[dict[str, Any], ...] = ()
