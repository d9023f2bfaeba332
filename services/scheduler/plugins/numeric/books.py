"""The scheduler's books for numeric claims (KEP-4381 "Builtin controllers", "Initialization").

Pure state fed one object at a time by the scheduler's snapshot: the ResourceClasses, the classic
claims, the vendor parameter objects (any kind: read generically by group, kind, namespace and
name), the NodeResourceCapacity objects, and one builtin controller per installed numeric model.
Capacities are regrouped per (node, driver) and handed to the model that serves each instance's
``apiVersion``; allocated claims are handed to the model of their allocation. Decisions of this
scheduler that the log does not show yet (Reserve) are *assumed*: recorded in the controller at
once and dropped again when the saga compensates, so concurrent cycles never double-book.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import numeric_v1alpha2 as nv
from draflow.services.dra.numeric.claims import as_json, is_numeric_class
from draflow.services.dra.numeric.model import (
    BuiltinController,
    Instance,
    InstanceKey,
    ModelDecodeError,
    decode_model_object,
)
from draflow.services.dra.numeric.registry import ModelRegistry

__all__ = ["Assumed", "NumericBooks", "ParamKey"]

ParamKey = tuple[str, str, str, str]  # (apiGroup, kind, namespace, name)


@dataclass(frozen=True, slots=True)
class Assumed:
    """An allocation Reserve decided, not yet in the claim."""

    pod_key: str
    claim_uid: str
    group: str  # the model
    node: str
    driver: str


class NumericBooks:
    def __init__(self, models: ModelRegistry) -> None:
        self.models = models
        self.controllers: dict[str, BuiltinController[Any, Any, Any]] = {
            group: model.controller() for group, model in models.models.items()
        }
        self.classes: dict[str, cv.ResourceClass] = {}
        self.claims: dict[tuple[str, str], cv.ResourceClaim] = {}
        self.params: dict[ParamKey, dict[str, Any]] = {}
        self.capacities: dict[str, nv.NodeResourceCapacity] = {}
        self._by_node_driver: dict[tuple[str, str], set[str]] = {}
        self.assumed: dict[tuple[str, str], Assumed] = {}  # claim key -> assumed allocation
        self.capacity_problems: dict[tuple[str, str, str], str] = {}  # (object, instance) -> why skipped
        self.ledger_versions: dict[tuple[str, str], int] = {}  # (node, driver) -> ledger subject seq

    def copy(self) -> NumericBooks:
        """Independent books with the same contents: a simulation snapshots them into its cycle
        state (KEP-4381 StartSimulation) and checkpoints them; the live books never change."""
        other = NumericBooks.__new__(NumericBooks)
        other.models = self.models
        other.controllers = {g: c.clone() for g, c in self.controllers.items()}
        other.classes = dict(self.classes)
        other.claims = dict(self.claims)
        other.params = dict(self.params)
        other.capacities = dict(self.capacities)
        other._by_node_driver = {k: set(v) for k, v in self._by_node_driver.items()}
        other.assumed = dict(self.assumed)
        other.capacity_problems = dict(self.capacity_problems)
        other.ledger_versions = dict(self.ledger_versions)
        return other

    # -- lookups ------------------------------------------------------------------------------------
    def lookup(self, api_group: str, kind: str, namespace: str, name: str) -> Any:
        return self.params.get((api_group, kind, namespace, name))

    def class_of(self, claim: cv.ResourceClaim) -> cv.ResourceClass | None:
        return self.classes.get(claim.spec.resource_class_name)

    def is_numeric(self, claim: cv.ResourceClaim) -> bool:
        """Numeric: allocated numerically already, or its class lists numeric parameters."""
        return claim.status.numeric_allocation is not None or is_numeric_class(self.class_of(claim))

    def counted(self, node: str, driver: str) -> tuple[str, ...]:
        """Claim uids the books count on this node for this driver (allocated or assumed)."""
        uids: set[str] = set()
        for ctl in self.controllers.values():
            uids |= ctl.claims_on(node, driver)
        return tuple(sorted(uids))

    # -- classes, parameter objects -------------------------------------------------------------
    def upsert_class(self, cls: cv.ResourceClass) -> None:
        self.classes[cls.metadata.name] = cls

    def delete_class(self, name: str) -> None:
        self.classes.pop(name, None)

    def upsert_param(self, obj: Any) -> ParamKey | None:
        data = as_json(obj)
        if data is None:
            return None
        key = _param_key(data)
        if key is None:
            return None
        self.params[key] = data
        return key

    def delete_param(self, kind: str, namespace: str, name: str) -> None:
        for key in [k for k in self.params if k[1:] == (kind, namespace, name)]:
            del self.params[key]

    # -- capacity -------------------------------------------------------------------------------
    def upsert_capacity(self, cap: nv.NodeResourceCapacity) -> None:
        old = self.capacities.get(cap.metadata.name)
        self.capacities[cap.metadata.name] = cap
        touched = {(cap.node_name, cap.driver_name)}
        if old is not None:
            touched.add((old.node_name, old.driver_name))
            self._by_node_driver.get((old.node_name, old.driver_name), set()).discard(old.metadata.name)
        self._by_node_driver.setdefault((cap.node_name, cap.driver_name), set()).add(cap.metadata.name)
        self._regroup(touched)

    def delete_capacity(self, name: str) -> None:
        old = self.capacities.pop(name, None)
        if old is not None:
            self._by_node_driver.get((old.node_name, old.driver_name), set()).discard(name)
            self._regroup({(old.node_name, old.driver_name)})

    def _regroup(self, pairs: Iterable[tuple[str, str]]) -> None:
        for node, driver in pairs:
            per_model: dict[str, list[Instance[Any]]] = {g: [] for g in self.controllers}
            for obj_name in sorted(self._by_node_driver.get((node, driver), ())):
                obj = self.capacities[obj_name]
                for inst in obj.instances:
                    problem_key = (obj_name, inst.id, inst.api_version)
                    self.capacity_problems.pop(problem_key, None)
                    model = self.models.for_api_version(inst.api_version)
                    if model is None or inst.kind != model.capacity_kind:
                        self.capacity_problems[problem_key] = (
                            f"no numeric model for {inst.api_version} {inst.kind}"
                        )
                        continue
                    try:
                        cap = decode_model_object(model.capacity_type, inst.data)
                    except ModelDecodeError as exc:
                        self.capacity_problems[problem_key] = str(exc)
                        continue
                    per_model[model.group].append(Instance(InstanceKey(node, driver, inst.id), cap))
            for group, instances in per_model.items():
                self.controllers[group].set_capacity(node, driver, instances)

    # -- claims ---------------------------------------------------------------------------------
    def upsert_claim(self, claim: cv.ResourceClaim) -> None:
        key = (claim.metadata.namespace, claim.metadata.name)
        old = self.claims.get(key)
        self.claims[key] = claim
        if old is not None and old.metadata.uid != claim.metadata.uid:
            self._drop_allocation(old.metadata.uid)
        alloc = claim.status.numeric_allocation
        if alloc is not None:
            self.assumed.pop(key, None)
            self._record_allocation(claim.metadata.uid, alloc)
        elif key not in self.assumed or self.assumed[key].claim_uid != claim.metadata.uid:
            self.assumed.pop(key, None)
            self._drop_allocation(claim.metadata.uid)

    def delete_claim(self, namespace: str, name: str) -> None:
        old = self.claims.pop((namespace, name), None)
        self.assumed.pop((namespace, name), None)
        if old is not None:
            self._drop_allocation(old.metadata.uid)

    def _record_allocation(self, uid: str, alloc: cv.NumericAllocation) -> None:
        model = self.models.for_api_version(alloc.api_version)
        if model is None:
            return
        try:
            data = decode_model_object(model.allocation_type, alloc.data)
        except ModelDecodeError:
            return
        for group, ctl in self.controllers.items():
            if group != model.group:
                ctl.observe_allocation(uid, "", "", None)
        self.controllers[model.group].observe_allocation(uid, alloc.node_name, alloc.driver_name, data)

    def _drop_allocation(self, uid: str) -> None:
        for ctl in self.controllers.values():
            if uid in ctl.allocations:
                ctl.observe_allocation(uid, "", "", None)

    # -- assume / forget ------------------------------------------------------------------------
    def assume(self, key: tuple[str, str], assumed: Assumed, allocation: Any) -> None:
        self.assumed[key] = assumed
        self.controllers[assumed.group].observe_allocation(
            assumed.claim_uid, assumed.node, assumed.driver, allocation
        )

    def forget_pod(self, pod_key: str) -> bool:
        """Drop what was assumed for the pod (claims the log shows allocated stay); True if any."""
        keys = [k for k, a in self.assumed.items() if a.pod_key == pod_key]
        for key in keys:
            a = self.assumed.pop(key)
            claim = self.claims.get(key)
            if claim is None or claim.status.numeric_allocation is None:
                self.controllers[a.group].observe_allocation(a.claim_uid, "", "", None)
        return bool(keys)


def _param_key(data: dict[str, Any]) -> ParamKey | None:
    api_version, kind = data.get("apiVersion"), data.get("kind")
    meta = data.get("metadata")
    if not isinstance(api_version, str) or not isinstance(kind, str) or not isinstance(meta, dict):
        return None
    return (
        api_version.rpartition("/")[0],
        kind,
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )
