"""KEP-4381's numeric models: what a model is and what its builtin controller does.

A model (:class:`NumericModel`) names three API types of its own group: the *capacity type* a
node publishes per resource instance (in ``NodeResourceCapacity.instances[].data``), the
*parameter type* a class's CEL template expands a vendor parameter object into, and the
*allocation type* the scheduler stores in the claim for the node plugin. Its builtin controller
(:class:`BuiltinController`) is pure bookkeeping, fed by the scheduler:

* ``set_capacity`` / ``observe_allocation``: the instances nodes offer and the allocations claims
  hold (from their status, or assumed by Reserve before the log shows them);
* ``allocate``: where a set of parameter objects fits on one node, jointly, against what is free
  now, returning one allocation per request (or the reason it does not fit). It never records: the
  scheduler observes the result in Reserve and drops it again on Unreserve, so the claim status
  stays the one source of truth and a restarted scheduler rebuilds the same books.

Free capacity may go negative (a driver removed an instance that was in use): the KEP asks models
to tolerate over-commitment; such a node then fits nothing more of that model until it recovers.
Models register through the entry-point group ``draflow.numeric_models``
(:mod:`draflow.services.dra.numeric.registry`).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec

__all__ = [
    "BuiltinController",
    "Instance",
    "InstanceKey",
    "ModelDecodeError",
    "NumericModel",
    "decode_model_object",
    "encode_model_object",
]

C = TypeVar("C")  # capacity type
P = TypeVar("P")  # parameter type
A = TypeVar("A")  # allocation type


class ModelDecodeError(ValueError):
    """JSON data does not decode into a model type (message names the field)."""


def _fold_keys(data: Any, struct: type) -> Any:
    """Go's JSON decoder matches field names case-insensitively (the KEP writes ``Required:``):
    map top-level keys onto the struct's wire names ignoring case."""
    if not isinstance(data, dict) or not isinstance(struct, type) or not issubclass(struct, msgspec.Struct):
        return data
    wire = {name.lower(): name for name in struct.__struct_encode_fields__}
    return {wire.get(k.lower(), k) if isinstance(k, str) else k: v for k, v in data.items()}


def decode_model_object(struct: type[Any], data: Any) -> Any:
    """Decode JSON data (a dict, as stored) into a model type; ``apiVersion``/``kind`` dropped."""
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k not in ("apiVersion", "kind")}
    try:
        return msgspec.convert(_fold_keys(data, struct), struct)
    except msgspec.ValidationError as exc:
        raise ModelDecodeError(str(exc)) from None


def encode_model_object(obj: Any) -> Any:
    return msgspec.to_builtins(obj)


@dataclass(frozen=True, slots=True)
class InstanceKey:
    node: str
    driver: str
    id: str


@dataclass(frozen=True, slots=True)
class Instance(Generic[C]):
    """One published resource instance, its capacity decoded into the model's type."""

    key: InstanceKey
    capacity: C


class BuiltinController(ABC, Generic[C, P, A]):
    """The books of one model: instances per node and driver, allocations per claim uid."""

    def __init__(self) -> None:
        self.instances: dict[tuple[str, str], dict[str, Instance[C]]] = {}
        self.allocations: dict[str, tuple[str, str, A]] = {}  # claim uid -> (node, driver, alloc)
        self._by_node: dict[tuple[str, str], set[str]] = {}

    # -- what the scheduler feeds ------------------------------------------------------------------
    def set_capacity(self, node: str, driver: str, instances: Sequence[Instance[C]]) -> None:
        """Replace what ``driver`` offers on ``node`` (empty: nothing)."""
        if instances:
            self.instances[(node, driver)] = {i.key.id: i for i in instances}
        else:
            self.instances.pop((node, driver), None)

    def observe_allocation(self, claim_uid: str, node: str, driver: str, allocation: A | None) -> None:
        """A claim holds ``allocation`` (None: it holds nothing any more)."""
        old = self.allocations.pop(claim_uid, None)
        if old is not None:
            self._by_node.get((old[0], old[1]), set()).discard(claim_uid)
        if allocation is not None:
            self.allocations[claim_uid] = (node, driver, allocation)
            self._by_node.setdefault((node, driver), set()).add(claim_uid)

    def clone(self) -> BuiltinController[C, P, A]:
        """Independent books with the same contents (a simulation's snapshot and checkpoints)."""
        other = copy.copy(self)
        other.instances = dict(self.instances)  # set_capacity replaces a pair's dict, never edits it
        other.allocations = dict(self.allocations)
        other._by_node = {k: set(v) for k, v in self._by_node.items()}
        return other

    def claims_on(self, node: str, driver: str) -> frozenset[str]:
        """The claim uids holding (or assumed to hold) capacity of ``driver`` on ``node``."""
        return frozenset(self._by_node.get((node, driver), ()))

    def node_allocations(self, node: str, driver: str) -> list[A]:
        uids = sorted(self._by_node.get((node, driver), ()))
        return [self.allocations[u][2] for u in uids]

    def node_instances(self, node: str, driver: str) -> list[Instance[C]]:
        found = self.instances.get((node, driver), {})
        return [found[k] for k in sorted(found)]

    # -- what a model implements -----------------------------------------------------------------
    @abstractmethod
    def allocate(self, node: str, driver: str, requests: Sequence[P]) -> list[A] | str:
        """One allocation per request, fitting jointly into what is free on the node now, or
        the reason they do not fit. Must be deterministic; must not record anything."""

    def instance_ids(self, allocation: A) -> tuple[str, ...]:
        """The instances an allocation uses (the kubelet's double check at prepare)."""
        ids = getattr(allocation, "instance", None)
        return (ids,) if isinstance(ids, str) else ()


@dataclass(frozen=True)
class NumericModel:
    """A numeric model: its API group and versions, its three types and its controller."""

    group: str
    versions: tuple[str, ...]
    capacity_kind: str
    capacity_type: type[Any]
    parameters_kind: str
    parameters_type: type[Any]
    allocation_kind: str
    allocation_type: type[Any]
    controller: Any  # () -> BuiltinController
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def api_version(self) -> str:
        """The version allocations are written in (the first listed)."""
        return f"{self.group}/{self.versions[0]}"

    def serves(self, api_version: str) -> bool:
        group, _, version = api_version.rpartition("/")
        return group == self.group and version in self.versions
