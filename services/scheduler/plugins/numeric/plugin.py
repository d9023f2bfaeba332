"""``NumericResources``: KEP-4381's numeric claims, allocated by the scheduler itself.

A classic claim whose class lists ``numericParameters`` needs no driver controller and no
``potentialNodes``/``unsuitableNodes`` round trips: the scheduler expands the class's template over
the claim's parameter object, asks the model's builtin controller where it fits and allocates it
in its own scheduling cycle (KEP "Allocation"):

* PreFilter: the pod's numeric claims. An allocated one must be reservable (shareable, unused, or
  already the pod's); a pending one is resolved (parameter object -> template -> model
  parameters). A missing parameter object waits; a template that fails is reported on the claim
  (a ``NumericParameters`` condition naming class, template and error, written by the shell) and
  on the pod (FailedScheduling with the same text), and the pod waits for a change.
* Filter: allocated claims only on their node; pending ones need capacity of their model and
  driver on the node (cheap), and, deferred to the nodes the framework would pick in score order,
  must fit jointly (``BuiltinController.allocate``, against what is free including assumed
  decisions).
* Reserve: the node's allocations are assumed in the books; Unreserve drops them.
* PreBind (``numeric_plans``): what the PodScheduling saga writes per claim: the allocation with
  the class and parameter object embedded, the pod in ``reservedFor``, and the capacity ledger
  stamp that keeps scheduler instances from over-committing a node.
* PostFilter: a delayed, allocated numeric claim that kept the pod off some node and has no other
  user is deallocated (the numeric reallocation saga), like structured claims.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.core_v1 import Pod
from draflow.events.api.meta import Condition
from draflow.services.dra.classic.podclaims import pod_claim_refs
from draflow.services.dra.numeric.claims import (
    NotReady,
    Resolved,
    build_allocation,
    resolve,
    template_condition,
)
from draflow.services.dra.numeric.model import ModelDecodeError, decode_model_object
from draflow.services.dra.numeric.plans import LedgerStamp, NumericClaimPlan
from draflow.services.dra.numeric.registry import ModelRegistry, load_models
from draflow.services.dra.numeric.template import TemplateError
from draflow.services.dra.resourceclaim import ClaimRef, is_controlled_by, pod_owner_reference
from draflow.services.scheduler.framework.assume import pod_key
from draflow.services.scheduler.framework.events import ActionType, EventResource
from draflow.services.scheduler.framework.interface import CycleState, EventRegistration, PostFilterOutcome
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.framework.status import SKIP, Status, error, unresolvable, unschedulable
from draflow.services.scheduler.plugins.numeric import simulation
from draflow.services.scheduler.plugins.numeric.books import Assumed, NumericBooks
from draflow.services.scheduler.plugins.numeric.simulation import SIMULATED

__all__ = ["NAME", "ConditionAsk", "NumericResources"]

NAME = "NumericResources"


@dataclass(frozen=True, slots=True)
class ConditionAsk:
    """Write ``condition`` on the claim (the shell appends it when it differs)."""

    namespace: str
    name: str
    uid: str
    condition: Condition


@dataclass(slots=True)
class _Pending:
    claim: cv.ResourceClaim
    cls: cv.ResourceClass
    resolved: Resolved

    @property
    def group(self) -> str:
        return str(self.resolved.expanded.model.group)


@dataclass(slots=True)
class NumericState:
    pending: list[_Pending] = field(default_factory=list)
    allocated: list[cv.ResourceClaim] = field(default_factory=list)
    results: dict[str, list[Any]] = field(default_factory=dict)  # node -> allocation per pending
    unavailable: list[cv.ResourceClaim] = field(default_factory=list)
    plans: dict[str, list[NumericClaimPlan]] = field(default_factory=dict)
    # per (model, driver) of the pending claims: the model's instances by (node, driver), the
    # driver, and the rejection when a node publishes none
    needs: list[tuple[Mapping[tuple[str, str], Any], str, Status]] = field(default_factory=list)


class NumericResources:
    name = NAME
    weight = 0

    def __init__(self, models: ModelRegistry | None = None) -> None:
        self.books = NumericBooks(models if models is not None else load_models())
        self.sink: Callable[[ConditionAsk], None] | None = None
        self.outbox: list[ConditionAsk] = []

    def books_of(self, state: CycleState) -> NumericBooks:
        """The books to decide on: a simulation's snapshot (KEP-4381) when the cycle state
        carries one, else the live books."""
        sim: NumericBooks | None = state.data.get(SIMULATED)
        return sim if sim is not None else self.books

    # -- ClusterAutoScalerPlugin (KEP-4381, simulation.py) -------------------------------------------
    def start_simulation(self, state: CycleState) -> Status | None:
        return simulation.start(self, state)

    def simulate_bind_pod(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
        return simulation.simulate_bind(self, state, pod, node)

    def simulate_evict_pod(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return simulation.simulate_evict(state, pod)

    def simulate_add_capacity(self, state: CycleState, obj: object) -> bool:
        return simulation.add_capacity(state, obj)

    def simulate_remove_capacity(self, state: CycleState, name: str) -> None:
        simulation.remove_capacity(state, name)

    def owns(self, namespace: str, name: str) -> bool:
        """Whether the classic plugin must leave this claim to us."""
        claim = self.books.claims.get((namespace, name))
        return claim is not None and self.books.is_numeric(claim)

    def _ask(self, claim: cv.ResourceClaim, message: str) -> None:
        current = next((c for c in claim.status.conditions if c.type == "NumericParameters"), None)
        if current is not None and current.message == message:
            return
        meta = claim.metadata
        ask = ConditionAsk(meta.namespace, meta.name, meta.uid, template_condition(message))
        if self.sink is not None:
            self.sink(ask)
        else:
            self.outbox.append(ask)

    # -- queueing -----------------------------------------------------------------------------------
    def events_to_register(self) -> list[EventRegistration]:
        return [
            EventRegistration(EventResource.NUMERIC, ActionType.ALL),
            EventRegistration(EventResource.NODE, ActionType.ADD),
        ]

    # -- PreFilter ----------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: Pod) -> Status | None:
        refs = pod_claim_refs(pod)
        if not refs:
            return SKIP
        books = self.books_of(state)
        ns, key = pod.metadata.namespace, pod_key(pod)
        data = NumericState()
        for ref in refs:
            claim = books.claims.get((ns, ref.claim_name))
            if claim is None or not books.is_numeric(claim):
                continue
            name = ref.claim_name
            if ref.from_template and not is_controlled_by(claim.metadata, pod.metadata.uid):
                return unresolvable(
                    f"resourceclaim {name} was not created for pod {pod.metadata.name}", plugin=NAME
                )
            if claim.metadata.deletion_timestamp:
                return unresolvable(f"resourceclaim {name} is being deleted", plugin=NAME)
            alloc = claim.status.numeric_allocation
            if alloc is not None:
                users = claim.status.reserved_for
                if not (alloc.shareable or not users or any(u.uid == pod.metadata.uid for u in users)):
                    return unresolvable(f"resourceclaim {name} is in use", plugin=NAME)
                data.allocated.append(claim)
                continue
            assumed = books.assumed.get((ns, name))
            if assumed is not None and assumed.pod_key != key:
                return unresolvable(f"resourceclaim {name} is in the process of being allocated", plugin=NAME)
            cls = books.class_of(claim)
            if cls is None:
                return unresolvable(f"resource class {claim.spec.resource_class_name} not found", plugin=NAME)
            try:
                resolved = resolve(claim, cls, books.lookup, books.models)
            except NotReady as exc:
                return unresolvable(f"resourceclaim {name}: {exc}", plugin=NAME)
            except TemplateError as exc:
                if books is self.books:  # a simulation writes nothing
                    self._ask(claim, str(exc))
                return unresolvable(f"resourceclaim {name}: {exc}", plugin=NAME)
            data.pending.append(_Pending(claim, cls, resolved))
        if not data.pending and not data.allocated:
            return SKIP
        for group, driver in dict.fromkeys((p.group, p.cls.driver_name) for p in data.pending):
            rejection = unschedulable(f"no {group} capacity of {driver} on the node", plugin=NAME)
            data.needs.append((books.controllers[group].instances, driver, rejection))
        state.data[NAME] = data
        return None

    # -- Filter -------------------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
        data: NumericState | None = state.data.get(NAME)
        if data is None:
            return None
        for claim in data.allocated:
            alloc = claim.status.numeric_allocation
            if alloc is not None and alloc.node_name != node.name:
                data.unavailable.append(claim)
                return unschedulable(
                    f"resourceclaim {claim.metadata.name} not available on the node", plugin=NAME
                )
        for instances, driver, rejection in data.needs:  # cheap: capacity of the model and driver
            if not instances.get((node.name, driver)):
                return rejection
        return None

    def wants_deferred(self, state: CycleState) -> bool:
        data: NumericState | None = state.data.get(NAME)
        return data is not None and bool(data.pending)

    def filter_deferred(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
        """The models' joint allocation on one node (the framework asks in score order until a
        node passes, so the full check runs on few nodes)."""
        data: NumericState = state.data[NAME]
        out = self._allocate(self.books_of(state), data.pending, node.name)
        if isinstance(out, str):
            return unschedulable(out, plugin=NAME)
        data.results[node.name] = out
        return None

    def _allocate(self, books: NumericBooks, pending: list[_Pending], node: str) -> list[Any] | str:
        """One allocation per pending claim, jointly per (model, driver)."""
        groups: dict[tuple[str, str], list[int]] = {}
        for i, p in enumerate(pending):
            groups.setdefault((p.group, p.cls.driver_name), []).append(i)
        results: list[Any] = [None] * len(pending)
        for (group, driver), indexes in groups.items():
            ctl = books.controllers[group]
            got = ctl.allocate(node, driver, [pending[i].resolved.expanded.parameters for i in indexes])
            if isinstance(got, str):
                return got
            for i, alloc in zip(indexes, got, strict=True):
                results[i] = alloc
        return results

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        return 0

    def normalize(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        return None

    # -- PostFilter ---------------------------------------------------------------------------------
    def post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> PostFilterOutcome:
        data: NumericState | None = state.data.get(NAME)
        if data is None or not data.unavailable:
            return PostFilterOutcome(unschedulable(plugin=NAME))
        uid = pod.metadata.uid
        seen: set[str] = set()
        for claim in data.unavailable:
            name = claim.metadata.name
            if name in seen:
                continue
            seen.add(name)
            users = claim.status.reserved_for
            if claim.spec.allocation_mode == cv.IMMEDIATE:
                continue
            if not users or (len(users) == 1 and users[0].uid == uid):
                ref = ClaimRef(namespace=claim.metadata.namespace, name=name, uid=claim.metadata.uid)
                message = f"deallocation of numeric ResourceClaim {ref} requested"
                return PostFilterOutcome(unschedulable(message, plugin=NAME), deallocate_numeric=ref)
        return PostFilterOutcome(unschedulable("still not schedulable", plugin=NAME))

    # -- Reserve / PreBind --------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        data: NumericState | None = state.data.get(NAME)
        if data is None:
            return None
        consumer = pod_owner_reference(pod)
        plans: list[NumericClaimPlan] = []
        if data.pending:
            results = data.results.get(node_name)
            if results is None:
                results_or_reason = self._allocate(self.books, data.pending, node_name)
                if isinstance(results_or_reason, str):
                    return error(
                        f"numeric claims no longer fit on {node_name}: {results_or_reason}", plugin=NAME
                    )
                results = results_or_reason
            stamps: dict[str, LedgerStamp] = {}
            for p in data.pending:
                driver = p.cls.driver_name
                if driver not in stamps:
                    stamps[driver] = LedgerStamp(
                        node=node_name,
                        driver=driver,
                        version=self.books.ledger_versions.get((node_name, driver), 0),
                        counted=self.books.counted(node_name, driver),
                    )
            for p, alloc in zip(data.pending, results, strict=True):
                meta = p.claim.metadata
                assumed = Assumed(pod_key(pod), meta.uid, p.group, node_name, p.cls.driver_name)
                self.books.assume((meta.namespace, meta.name), assumed, alloc)
                plans.append(
                    NumericClaimPlan(
                        namespace=meta.namespace,
                        name=meta.name,
                        uid=meta.uid,
                        allocation=build_allocation(p.cls, p.resolved, node_name, alloc),
                        consumer=consumer,
                        ledger=stamps[p.cls.driver_name],
                    )
                )
        for claim in data.allocated:
            meta = claim.metadata
            plans.append(
                NumericClaimPlan(namespace=meta.namespace, name=meta.name, uid=meta.uid, consumer=consumer)
            )
        data.plans[node_name] = plans
        return None

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        self.books.forget_pod(pod_key(pod))

    def forget_pod(self, key: str) -> bool:
        """The framework forgets the pod's assumed decision (saga compensation, pod deleted)."""
        return self.books.forget_pod(key)

    def numeric_plans(self, state: CycleState, pod: Pod, node_name: str) -> list[NumericClaimPlan]:
        data: NumericState | None = state.data.get(NAME)
        return [] if data is None else data.plans.get(node_name, [])

    def assume_plan(self, pod: Pod, node_name: str, plan: NumericClaimPlan) -> None:
        """Re-assume a decision another process took (a resumed saga), unless the log has it."""
        alloc = plan.allocation
        claim = self.books.claims.get((plan.namespace, plan.name))
        if alloc is None or (claim is not None and claim.status.numeric_allocation is not None):
            return
        model = self.books.models.for_api_version(alloc.api_version)
        if model is None:
            return
        try:
            data = decode_model_object(model.allocation_type, alloc.data)
        except ModelDecodeError:
            return
        assumed = Assumed(pod_key(pod), plan.uid, model.group, node_name, alloc.driver_name)
        self.books.assume((plan.namespace, plan.name), assumed, data)
