"""Identifiers, feature switches, errors and the allocated-state snapshot the scheduler hands in.

Device IDs are plain tuples ``(driver, pool, device)`` because the search hashes them millions of
times; ``DeviceID`` is a NamedTuple so callers can still write ``did.driver``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from events.api.resource_v1 import AllocationResult, ResourceClaim
from events.quantity import Quantity

__all__ = [
    "RESULTS_MAX_SIZE",
    "AllocatedState",
    "AllocationError",
    "AllocationTimeout",
    "DeviceID",
    "Features",
    "InvalidInputError",
    "NodeAllocationError",
    "NodeLike",
    "SharedDeviceID",
]

# resource.k8s.io/v1 AllocationResultsMaxSize: at most this many devices per claim.
RESULTS_MAX_SIZE = 32


class DeviceID(NamedTuple):
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class SharedDeviceID(NamedTuple):
    driver: str
    pool: str
    device: str
    share_id: str

    @property
    def device_id(self) -> DeviceID:
        return DeviceID(self.driver, self.pool, self.device)


class AllocationError(Exception):
    """Base of everything ``Allocator.allocate`` raises."""


class InvalidInputError(AllocationError):
    """Broken input (CEL error, unknown class, unsupported field): abort the attempt for the pod."""


class NodeAllocationError(AllocationError):
    """Node-scoped failure (upstream ErrFailedAllocationOnNode): other nodes may still work.

    ``invalid_pools`` lists ("driver/pool", reason) for diagnostics (upstream only logs them).
    """

    def __init__(self, message: str, invalid_pools: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.invalid_pools = invalid_pools or []


class AllocationTimeout(AllocationError):
    """The time or step budget ran out before the search finished (upstream: context cancelled)."""


class _Meta(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


class NodeLike(Protocol):
    """What the allocator reads from a Node: its name and labels (a core/v1 Node fits)."""

    @property
    def metadata(self) -> _Meta: ...


@dataclass(frozen=True, slots=True)
class Features:
    """DRA feature gates the allocator honours; everything on is the default (and what is tested).

    The switches reproduce upstream's "feature disabled" errors and filters. (CEL always
    understands list attributes; ``list_type_attributes`` only affects constraints.)
    """

    admin_access: bool = True
    prioritized_list: bool = True
    partitionable_devices: bool = True
    device_taints: bool = True
    device_binding_and_status: bool = True
    consumable_capacity: bool = True
    list_type_attributes: bool = True


@dataclass(frozen=True, slots=True)
class AllocatedState:
    """Devices in use by claims that are already allocated (or being allocated) cluster-wide.

    ``exclusive``: device IDs allocated without a shareID (admin-access results excluded).
    ``shared``: (device, shareID) pairs of multi-allocatable devices.
    ``consumed``: per device, the summed consumedCapacity of its shared allocations.
    """

    exclusive: frozenset[tuple[str, str, str]] = frozenset()
    shared: frozenset[tuple[str, str, str, str]] = frozenset()
    consumed: Mapping[tuple[str, str, str], Mapping[str, Quantity]] = field(default_factory=dict)
    # Derived: every device that is allocated in any way (counters are charged for these).
    allocated_any: frozenset[tuple[str, str, str]] = frozenset()
    shared_devices: frozenset[tuple[str, str, str]] = frozenset()

    @classmethod
    def build(
        cls,
        exclusive: Iterable[tuple[str, str, str]] = (),
        shared: Iterable[tuple[str, str, str, str]] = (),
        consumed: Mapping[tuple[str, str, str], Mapping[str, Quantity]] | None = None,
    ) -> AllocatedState:
        excl = frozenset(DeviceID(*d) for d in exclusive)
        shr = frozenset(SharedDeviceID(*s) for s in shared)
        cons: dict[tuple[str, str, str], Mapping[str, Quantity]] = {
            DeviceID(*k): dict(v) for k, v in (consumed or {}).items()
        }
        shared_devices = frozenset(DeviceID(*s[:3]) for s in shr) | frozenset(cons)
        return cls(
            exclusive=excl,
            shared=shr,
            consumed=cons,
            allocated_any=excl | shared_devices,
            shared_devices=shared_devices,
        )

    @classmethod
    def from_claims(cls, claims: Iterable[ResourceClaim]) -> AllocatedState:
        """Collect the state from allocated ResourceClaims the way kube-scheduler does.

        Every result of every allocated claim counts, except adminAccess results; a result with
        a shareID is shared usage (plus its consumedCapacity), any other is exclusive.
        """
        allocations = (claim.status.allocation for claim in claims)
        return cls.build().with_allocations(a for a in allocations if a is not None)

    def with_allocations(self, allocations: Iterable[AllocationResult]) -> AllocatedState:
        """This state plus more AllocationResults (e.g. in-flight allocations of other pods)."""
        exclusive: set[tuple[str, str, str]] = set(self.exclusive)
        shared: set[tuple[str, str, str, str]] = set(self.shared)
        consumed: dict[tuple[str, str, str], dict[str, Quantity]] = {
            k: dict(v) for k, v in self.consumed.items()
        }
        for allocation in allocations:
            for res in allocation.devices.results:
                if res.admin_access:
                    continue
                did = DeviceID(res.driver, res.pool, res.device)
                if res.share_id is None:
                    exclusive.add(did)
                    continue
                shared.add(SharedDeviceID(res.driver, res.pool, res.device, res.share_id))
                if res.consumed_capacity:
                    acc = consumed.setdefault(did, {})
                    for name, value in res.consumed_capacity.items():
                        q = Quantity.parse(value)
                        acc[name] = acc[name] + q if name in acc else q
        return AllocatedState.build(exclusive, shared, consumed)
