"""The control-plane driver plugin interface (KEP-3063 "resource driver controller") and its loader.

A classic driver plugs into the driver-controller service as a Python object found through the
entry-point group ``draflow.classic_drivers`` (name = driver name, value = a zero-argument factory
returning a :class:`ControllerPlugin`). The service calls it from its sagas:

* ``allocate(claim, resource_class, parameters, selected_node)`` -> :class:`AllocationResult`
  (attributes, where the resource is available, user limit) or :class:`Failure` (``definite``:
  will not work for these parameters / this node; otherwise transient, retried) or
  :class:`InProgress` (started but not finished, e.g. an FPGA being programmed: call again);
* ``deallocate(claim)`` -> :class:`Freed`, :class:`Failure` or :class:`InProgress`; it must work
  from ``claim.status.attributes`` alone (the class may be gone by then);
* ``unsuitable_nodes(pod, claims, potential_nodes)`` -> per claim name the potential nodes where
  the claim cannot be allocated (all the pod's pending claims of this driver are asked together so
  a driver can account for them jointly);
* ``observe(obj)``: the inventory the plugin needs (Nodes, its own per-node capacity objects) and
  already allocated claims after a restart (rebuild the books from their attributes).

Calls must be deterministic functions of what the plugin observed and was asked before, and
idempotent per claim uid (a saga step may be repeated after a crash).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Protocol, TypeAlias, runtime_checkable

import msgspec

from events.api import classic_v1alpha1 as cv
from events.api import core_v1 as c1
from events.api.base import ApiStruct
from events.api.meta import NodeSelector

__all__ = [
    "ENTRY_POINT_GROUP",
    "AllocateOutcome",
    "AllocationResult",
    "ClaimAllocation",
    "ControllerPlugin",
    "DeallocateOutcome",
    "Failure",
    "Freed",
    "InProgress",
    "Parameters",
    "PluginLoadError",
    "declared_entry_points",
    "load_plugins",
]

ENTRY_POINT_GROUP = "draflow.classic_drivers"


class Parameters(msgspec.Struct, frozen=True, kw_only=True):
    """Both opaque parameter sets; the driver can tell the administrator's from the user's."""

    class_parameters: Any = None
    claim_parameters: Any = None


class AllocationResult(msgspec.Struct, frozen=True, kw_only=True):
    """A successful allocation: written into the claim status by the allocation saga."""

    attributes: dict[str, str] = {}
    available_on_nodes: NodeSelector | None = None  # None: usable on every node
    user_limit: int = 1  # -1: unlimited


class Failure(msgspec.Struct, frozen=True, kw_only=True):
    """``definite``: retrying the same request cannot succeed (bad parameters, node unsuitable)."""

    reason: str
    definite: bool = False


class InProgress(msgspec.Struct, frozen=True, kw_only=True):
    """The driver is working on it (programming delay); the saga asks again (a retry, no failure)."""

    reason: str


class Freed(msgspec.Struct, frozen=True, kw_only=True):
    """The resource was released (also for a claim the driver never allocated: idempotent)."""


AllocateOutcome: TypeAlias = AllocationResult | Failure | InProgress
DeallocateOutcome: TypeAlias = Freed | Failure | InProgress


class ClaimAllocation(msgspec.Struct, frozen=True, kw_only=True):
    """One claim of a pod as the driver sees it (pod claim name, claim, its class, parameters)."""

    pod_claim_name: str
    claim: cv.ResourceClaim
    resource_class: cv.ResourceClass
    parameters: Parameters


@runtime_checkable
class ControllerPlugin(Protocol):
    """A classic DRA driver's control-plane part."""

    @property
    def driver_name(self) -> str: ...

    def observe(self, obj: ApiStruct) -> None:
        """Inventory and restore: Nodes, driver-owned objects, allocated claims of this driver."""
        ...

    def allocate(
        self,
        claim: cv.ResourceClaim,
        resource_class: cv.ResourceClass,
        parameters: Parameters,
        selected_node: str | None,
    ) -> AllocateOutcome: ...

    def deallocate(self, claim: cv.ResourceClaim) -> DeallocateOutcome: ...

    def unsuitable_nodes(
        self, pod: c1.Pod | None, claims: Sequence[ClaimAllocation], potential_nodes: Sequence[str]
    ) -> dict[str, tuple[str, ...]]: ...


def declared_entry_points(pyproject: Path) -> list[EntryPoint]:
    """The group's entry points as declared in a checkout's pyproject.toml (an editable install
    made before they were added does not list them until ``pip install -e .`` runs again)."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return []
    table = data.get("project", {}).get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
    return [EntryPoint(name=k, value=v, group=ENTRY_POINT_GROUP) for k, v in table.items()]


class PluginLoadError(Exception):
    """An entry point that cannot be loaded or does not produce a ControllerPlugin."""


def load_plugins(
    wanted: Iterable[str] | None = None,
    *,
    available: Iterable[EntryPoint] | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, ControllerPlugin]:
    """Instantiate the plugins of ``draflow.classic_drivers`` (all, or the ``wanted`` names).

    ``options[name]`` are keyword arguments for that plugin's factory. ``available`` replaces
    the installed entry points (tests, or a service configured with explicit plugins).
    """
    eps = list(entry_points(group=ENTRY_POINT_GROUP) if available is None else available)
    by_name = {ep.name: ep for ep in eps}
    names = list(by_name) if wanted is None else list(wanted)
    out: dict[str, ControllerPlugin] = {}
    for name in names:
        ep = by_name.get(name)
        if ep is None:
            known = ", ".join(sorted(by_name)) or "none"
            raise PluginLoadError(f"classic driver {name!r}: no entry point in {ENTRY_POINT_GROUP} ({known})")
        try:
            factory: Callable[..., Any] = ep.load()
            plugin = factory(**dict((options or {}).get(name, {})))
        except Exception as exc:
            raise PluginLoadError(f"classic driver {name!r} ({ep.value}): {exc}") from exc
        if not isinstance(plugin, ControllerPlugin):
            raise PluginLoadError(f"classic driver {name!r} ({ep.value}): not a ControllerPlugin")
        if plugin.driver_name != name:
            raise PluginLoadError(
                f"classic driver {name!r} ({ep.value}): plugin reports driver {plugin.driver_name!r}"
            )
        out[name] = plugin
    return out
