"""Which plugin instance serves each DRA driver on this node.

Upstream's rule (``pkg/kubelet/cm/dra/plugin``, with ``RollingUpdate``): several instances of one
driver may be registered at once, each through its own registration socket; calls go to the one
registered last, and when it deregisters the newest remaining one takes over, so pods keep being
prepared and unprepared while a plugin is replaced. The registry is a read-only ``Mapping`` of
driver name to the serving instance's client, which is what the kubelet's prepare path looks up.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Instance", "PluginRegistry"]


@dataclass(frozen=True, slots=True)
class Instance:
    """One registered plugin: found through ``socket``, served on ``endpoint``."""

    driver: str
    socket: Path
    endpoint: str
    service: str  # the version chosen, e.g. "v1.DRAPlugin"
    client: Any
    order: int  # registration order: the highest serves


class PluginRegistry(Mapping[str, Any]):
    def __init__(self) -> None:
        self._by_socket: dict[Path, Instance] = {}
        self._order = 0

    def add(self, driver: str, socket: Path, endpoint: str, service: str, client: Any) -> Instance | None:
        """Register an instance; returns the instance it replaces at the same socket, if any."""
        self._order += 1
        old = self._by_socket.get(socket)
        self._by_socket[socket] = Instance(driver, socket, endpoint, service, client, self._order)
        return old

    def remove(self, socket: Path) -> Instance | None:
        return self._by_socket.pop(socket, None)

    def instances(self, driver: str | None = None) -> list[Instance]:
        """Registered instances (of one driver), oldest first."""
        return sorted(
            (i for i in self._by_socket.values() if driver is None or i.driver == driver),
            key=lambda i: i.order,
        )

    def serving(self, driver: str) -> Instance | None:
        found = self.instances(driver)
        return found[-1] if found else None

    # -- Mapping: driver -> the serving instance's client --------------------------------------

    def __getitem__(self, driver: str) -> Any:
        instance = self.serving(driver)
        if instance is None:
            raise KeyError(driver)
        return instance.client

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({i.driver for i in self._by_socket.values()}))

    def __len__(self) -> int:
        return len({i.driver for i in self._by_socket.values()})
