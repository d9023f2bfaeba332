"""The KEP's counter model, ``counter.dra.config.k8s.io``: instances that hold a number of units.

* ``Capacity{metadata.labels, count}``: one instance offers ``count`` units (frobnicators, ...).
* ``Parameters{required, selector}``: a claim needs ``required`` units from one instance whose
  labels match ``selector``.
* ``Allocation{instance, count}``: the instance the units were taken from.

Allocation is best fit and deterministic: of the matching instances with enough free units, the
one with the fewest free (ties: the lowest id), so large instances stay free for large claims.
Several claims of one pod on one node are placed one after the other, each seeing the units the
earlier ones took.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import msgspec

from draflow.events.api.meta import LabelSelector
from draflow.services.dra.numeric.labels import selector_matches
from draflow.services.dra.numeric.model import BuiltinController, NumericModel

__all__ = ["GROUP", "MODEL", "Allocation", "Capacity", "CounterController", "ModelMeta", "Parameters"]

GROUP = "counter.dra.config.k8s.io"

NonNegative = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class ModelMeta(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The parts of ObjectMeta a model reads (labels for selectors)."""

    name: str = ""
    labels: dict[str, str] = {}


class Capacity(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    metadata: ModelMeta = msgspec.field(default_factory=ModelMeta)
    count: NonNegative = 0


class Parameters(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    metadata: ModelMeta = msgspec.field(default_factory=ModelMeta)
    required: Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
    selector: LabelSelector | None = None


class Allocation(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    instance: str
    count: NonNegative


class CounterController(BuiltinController[Capacity, Parameters, Allocation]):
    def free(self, node: str, driver: str) -> dict[str, int]:
        """Units left per instance id (negative: over-committed after a capacity shrink)."""
        free = {i.key.id: i.capacity.count for i in self.node_instances(node, driver)}
        for alloc in self.node_allocations(node, driver):
            free[alloc.instance] = free.get(alloc.instance, 0) - alloc.count
        return free

    def allocate(self, node: str, driver: str, requests: Sequence[Parameters]) -> list[Allocation] | str:
        instances = self.node_instances(node, driver)
        if not instances:
            return "no counter capacity published"
        free = self.free(node, driver)
        out: list[Allocation] = []
        for req in requests:
            fits = [
                (free.get(i.key.id, 0), i.key.id)
                for i in instances
                if selector_matches(req.selector, i.capacity.metadata.labels)
                and free.get(i.key.id, 0) >= req.required
            ]
            if not fits:
                return f"insufficient counter capacity: {req.required} required"
            _, chosen = min(fits)
            free[chosen] -= req.required
            out.append(Allocation(instance=chosen, count=req.required))
        return out


MODEL = NumericModel(
    group=GROUP,
    versions=("v1alpha1", "v1beta1"),
    capacity_kind="Capacity",
    capacity_type=Capacity,
    parameters_kind="Parameters",
    parameters_type=Parameters,
    allocation_kind="Allocation",
    allocation_type=Allocation,
    controller=CounterController,
    description="instances holding a count of units; a claim takes units from one instance",
)
