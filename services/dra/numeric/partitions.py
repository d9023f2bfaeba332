"""A richer numeric model, ``partitions.dra.config.k8s.io``: memory partitions of accelerators.

An accelerator instance has ``memory`` (a quantity) and at most ``maxPartitions`` partitions; a
claim asks for one partition of ``memory`` bytes, optionally on an instance whose labels match
``selector`` and with at least ``minComputeUnits`` compute units per partition. Two dimensions are
tracked at once (bytes and partition slots) and the allocation names the partition *slot* it
got, the lowest free one, so the node plugin can configure exactly that partition:

* ``Capacity{metadata.labels, memory, maxPartitions, computeUnits}``
* ``Parameters{memory, selector, minComputeUnits}``
* ``Allocation{instance, partition, memory}``

Compute units are shared evenly among ``maxPartitions`` partitions, so an instance with
``computeUnits: 64`` and ``maxPartitions: 4`` offers 16 per partition. Allocation is best fit on
memory (least free memory that fits; ties: lowest id).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import msgspec

from draflow.events.api.meta import LabelSelector
from draflow.events.quantity import Quantity, QuantityError
from draflow.services.dra.numeric.counter import ModelMeta
from draflow.services.dra.numeric.labels import selector_matches
from draflow.services.dra.numeric.model import BuiltinController, NumericModel

__all__ = ["GROUP", "MODEL", "Allocation", "Capacity", "Parameters", "PartitionController"]

GROUP = "partitions.dra.config.k8s.io"

_Count = Annotated[int, msgspec.Meta(ge=0, le=1024)]


def _bytes(value: str | int, field: str) -> int:
    try:
        q = Quantity.parse(value)
    except QuantityError as exc:
        raise ValueError(f"{field}: {exc}") from None
    n = q.value()
    if n <= 0:
        raise ValueError(f"{field}: must be greater than zero")
    return n


class Capacity(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    metadata: ModelMeta = msgspec.field(default_factory=ModelMeta)
    memory: str | int
    max_partitions: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 1
    compute_units: _Count = 0

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "memory", _bytes(self.memory, "memory"))


class Parameters(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    metadata: ModelMeta = msgspec.field(default_factory=ModelMeta)
    memory: str | int
    selector: LabelSelector | None = None
    min_compute_units: _Count = 0

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "memory", _bytes(self.memory, "memory"))


class Allocation(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    instance: str
    partition: int
    memory: int


class PartitionController(BuiltinController[Capacity, Parameters, Allocation]):
    def allocate(self, node: str, driver: str, requests: Sequence[Parameters]) -> list[Allocation] | str:
        instances = self.node_instances(node, driver)
        if not instances:
            return "no partitionable accelerators published"
        free_mem: dict[str, int] = {}
        used_slots: dict[str, set[int]] = {}
        for inst in instances:
            free_mem[inst.key.id] = int(inst.capacity.memory)
            used_slots[inst.key.id] = set()
        for alloc in self.node_allocations(node, driver):
            free_mem[alloc.instance] = free_mem.get(alloc.instance, 0) - alloc.memory
            used_slots.setdefault(alloc.instance, set()).add(alloc.partition)
        out: list[Allocation] = []
        for req in requests:
            need = int(req.memory)
            best: tuple[int, str, int] | None = None
            for inst in instances:
                cap, iid = inst.capacity, inst.key.id
                if not selector_matches(req.selector, cap.metadata.labels):
                    continue
                if cap.compute_units // cap.max_partitions < req.min_compute_units:
                    continue
                slot = next((s for s in range(cap.max_partitions) if s not in used_slots[iid]), None)
                if slot is None or free_mem[iid] < need:
                    continue
                candidate = (free_mem[iid], iid, slot)
                if best is None or candidate < best:
                    best = candidate
            if best is None:
                return f"no accelerator with a free partition of {need} bytes"
            _, iid, slot = best
            free_mem[iid] -= need
            used_slots[iid].add(slot)
            out.append(Allocation(instance=iid, partition=slot, memory=need))
        return out


MODEL = NumericModel(
    group=GROUP,
    versions=("v1alpha1",),
    capacity_kind="Capacity",
    capacity_type=Capacity,
    parameters_kind="Parameters",
    parameters_type=Parameters,
    allocation_kind="Allocation",
    allocation_type=Allocation,
    controller=PartitionController,
    description="accelerators split into memory partitions; a claim takes one partition slot",
)
