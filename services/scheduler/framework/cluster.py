"""The scheduler's in-memory cluster snapshot, updated one object change at a time.

The service shell feeds every object it consumes (``upsert``/``delete``); each call updates the
node accounting, the claim and device bookkeeping and returns the :class:`ClusterEvent` the
scheduling queue needs for requeueing (None when nothing the scheduler reads changed). Nothing
here is rebuilt per scheduling cycle: node fit reads running totals, the DRA precheck reads the
device index, and the allocator gets a cached ``AllocatedState`` and slice snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from draflow.events.api.core_v1 import Node, Pod
from draflow.events.api.resource_v1 import (
    AllocationResult,
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceSlice,
)
from draflow.services.dra.extended.claim import is_extended_resource_claim
from draflow.services.dra.extended.mapping import ExtendedResourceIndex
from draflow.services.dra.resourceclaim import is_pod_terminal
from draflow.services.dra.structured import AllocatedState, Features, SliceSnapshot, apply_taint_rules
from draflow.services.scheduler.framework.assume import (
    AssumeCache,
    AssumedPod,
    ClaimKey,
    PendingAllocation,
    pod_key,
)
from draflow.services.scheduler.framework.devices import DeviceIndex
from draflow.services.scheduler.framework.events import (
    ActionType,
    ClusterEvent,
    EventResource,
    node_update_action,
    pod_update_action,
)
from draflow.services.scheduler.framework.ledger import Contribution, DeviceLedger, contribution
from draflow.services.scheduler.framework.nodeinfo import NodeInfo, PodUsage
from draflow.services.scheduler.framework.resources import pod_requests

__all__ = ["ClusterState", "is_assigned"]


def is_assigned(pod: Pod) -> bool:
    """Bound to a node and still holding its resources there."""
    return bool(pod.spec.node_name) and not is_pod_terminal(pod)


def _older(new_rv: str, old_rv: str) -> bool:
    """True when both resourceVersions are numbers and the new one is older (a stale replay)."""
    return new_rv.isdigit() and old_rv.isdigit() and int(new_rv) < int(old_rv)


class ClusterState:
    """See the module docstring. Single-threaded: the service applies changes between cycles."""

    def __init__(self, features: Features | None = None) -> None:
        self.features = features if features is not None else Features()
        self.nodes: dict[str, NodeInfo] = {}
        self._order: list[NodeInfo] | None = None
        self._pods_by_node: dict[str, dict[str, PodUsage]] = {}
        self.pods: dict[str, Pod] = {}  # assigned pods by namespace/name
        self.claims: dict[ClaimKey, ResourceClaim] = {}
        self.classes: dict[str, DeviceClass] = {}
        # KEP-5004: extended resource name -> DeviceClass, and each pod's special claims
        # (owner pod uid -> claim keys), so PreFilter finds them without scanning every claim
        self.extended = ExtendedResourceIndex()
        self.special_claims: dict[str, set[ClaimKey]] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.taint_rules: dict[str, DeviceTaintRule] = {}
        self._pool_slices: dict[tuple[str, str], set[str]] = {}
        self.ledger = DeviceLedger()
        self._usage: dict[ClaimKey, tuple[AllocationResult, Contribution]] = {}
        self.assumed = AssumeCache()
        # plugins with their own assumed decisions (numeric claims): told when a pod is forgotten
        self.forget_hooks: list[Callable[[str], bool]] = []
        self.devices = DeviceIndex(self.features, self.ledger.exclusive, self._effective_slices)

    # -- reads ----------------------------------------------------------------------------------
    def node_list(self) -> list[NodeInfo]:
        """Nodes in name order (the order kube-scheduler's sampling walks; stable for replays)."""
        order = self._order
        if order is None:
            order = sorted(self.nodes.values(), key=lambda n: n.name)
            for i, info in enumerate(order):
                info.index = i
            self._order = order
        return order

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        return self.claims.get((namespace, name))

    def device_class(self, name: str) -> DeviceClass | None:
        return self.classes.get(name)

    def pending_allocation(self, namespace: str, name: str) -> PendingAllocation | None:
        return self.assumed.claims.get((namespace, name))

    def pool_slices(self, driver: str, pool: str) -> list[ResourceSlice]:
        """The slices of one pool (the guards of an allocation need its counter sets)."""
        return [self.slices[n] for n in sorted(self._pool_slices.get((driver, pool), ()))]

    def allocated_state(self) -> AllocatedState:
        return self.ledger.allocated_state()

    def slice_snapshot(self) -> SliceSnapshot:
        return self.devices.snapshot()

    # -- generic entry points -------------------------------------------------------------------
    def upsert(self, obj: object) -> ClusterEvent | None:
        """Apply a created or changed object; returns the event for the queue (None: no change)."""
        if isinstance(obj, Pod):
            return self.upsert_pod(obj)
        if isinstance(obj, ResourceClaim):
            return self.upsert_claim(obj)
        if isinstance(obj, Node):
            return self.upsert_node(obj)
        if isinstance(obj, ResourceSlice):
            return self.upsert_slice(obj)
        if isinstance(obj, DeviceClass):
            return self.upsert_class(obj)
        if isinstance(obj, DeviceTaintRule):
            return self.upsert_taint_rule(obj)
        return None

    def delete(self, kind: str, namespace: str, name: str) -> ClusterEvent | None:
        """Apply a deletion of ``kind`` (``Pod``, ``Node``, ``ResourceClaim``, ...)."""
        if kind == "Pod":
            return self.delete_pod(namespace, name)
        if kind == "ResourceClaim":
            return self.delete_claim(namespace, name)
        if kind == "Node":
            return self.delete_node(name)
        if kind == "ResourceSlice":
            return self.delete_slice(name)
        if kind == "DeviceClass":
            return self.delete_class(name)
        if kind == "DeviceTaintRule":
            return self.delete_taint_rule(name)
        return None

    # -- nodes ----------------------------------------------------------------------------------
    def upsert_node(self, node: Node) -> ClusterEvent | None:
        name = node.metadata.name
        info = self.nodes.get(name)
        if info is None:
            self.nodes[name] = NodeInfo(node, self._pods_by_node.setdefault(name, {}))
            self._order = None
            self.devices.node_changed(name)
            return ClusterEvent(EventResource.NODE, ActionType.ADD, None, node)
        old = info.node
        if _older(node.metadata.resource_version, old.metadata.resource_version):
            return None
        action = node_update_action(old, node)
        info.set_node(node)
        if action & ActionType.UPDATE_NODE_LABEL:
            self.devices.node_changed(name)
        return ClusterEvent(EventResource.NODE, action, old, node) if action else None

    def delete_node(self, name: str) -> ClusterEvent | None:
        info = self.nodes.pop(name, None)
        if info is None:
            return None
        self._order = None
        self.devices.node_changed(name)
        return ClusterEvent(EventResource.NODE, ActionType.DELETE, info.node, None)

    # -- pods -----------------------------------------------------------------------------------
    def _place(self, key: str, node_name: str, usage: PodUsage) -> None:
        info = self.nodes.get(node_name)
        if info is not None:
            info.add_pod(key, usage)
        else:
            self._pods_by_node.setdefault(node_name, {})[key] = usage

    def _unplace(self, key: str, node_name: str) -> None:
        info = self.nodes.get(node_name)
        if info is not None:
            info.remove_pod(key)
        else:
            self._pods_by_node.get(node_name, {}).pop(key, None)

    def upsert_pod(self, pod: Pod) -> ClusterEvent | None:
        """Assigned pods count on their node; an unassigned pod is the queue's business (None)."""
        key = pod_key(pod)
        old = self.pods.get(key)
        if old is not None and _older(pod.metadata.resource_version, old.metadata.resource_version):
            return None
        if not is_assigned(pod):
            if old is None:
                return None
            del self.pods[key]
            self._unplace(key, old.spec.node_name)
            return ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE, old, None)
        node_name = pod.spec.node_name
        assumed = self.assumed.pods.pop(key, None)
        if assumed is not None and assumed.placed and assumed.node_name != node_name:
            self._unplace(key, assumed.node_name)
        if old is not None and old.spec.node_name != node_name:
            self._unplace(key, old.spec.node_name)
        self.pods[key] = pod
        self._place(key, node_name, PodUsage(pod.metadata.uid, pod_requests(pod), False))
        if old is None:
            return ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD, None, pod)
        return ClusterEvent(EventResource.ASSIGNED_POD, pod_update_action(old, pod), old, pod)

    def delete_pod(self, namespace: str, name: str) -> ClusterEvent | None:
        key = f"{namespace}/{name}"
        old = self.pods.pop(key, None)
        if old is None:
            return None
        self._unplace(key, old.spec.node_name)
        return ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE, old, None)

    # -- claims ---------------------------------------------------------------------------------
    def upsert_claim(self, claim: ResourceClaim) -> ClusterEvent | None:
        key = (claim.metadata.namespace, claim.metadata.name)
        old = self.claims.get(key)
        if old is not None and _older(claim.metadata.resource_version, old.metadata.resource_version):
            return None
        self.claims[key] = claim
        if old is not None:
            self._unindex_special(key, old)
        self._index_special(key, claim)
        replaced = old is not None and old.metadata.uid != claim.metadata.uid
        if claim.status.allocation is not None or replaced:
            self.assumed.claims.pop(key, None)  # the log caught up (or the claim was replaced)
        self._refresh_usage(key)
        action = ActionType.ADD if old is None else ActionType.UPDATE_OTHER
        return ClusterEvent(EventResource.RESOURCE_CLAIM, action, old, claim)

    def delete_claim(self, namespace: str, name: str) -> ClusterEvent | None:
        key = (namespace, name)
        old = self.claims.pop(key, None)
        self.assumed.claims.pop(key, None)
        self._refresh_usage(key)
        if old is None:
            return None
        self._unindex_special(key, old)
        return ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.DELETE, old, None)

    def _index_special(self, key: ClaimKey, claim: ResourceClaim) -> None:
        if not is_extended_resource_claim(claim):
            return
        for ref in claim.metadata.owner_references:
            if ref.controller:
                self.special_claims.setdefault(ref.uid, set()).add(key)

    def _unindex_special(self, key: ClaimKey, claim: ResourceClaim) -> None:
        for ref in claim.metadata.owner_references:
            keys = self.special_claims.get(ref.uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.special_claims[ref.uid]

    def special_claims_of(self, pod: Pod) -> list[ResourceClaim]:
        """The stored special extended-resource claims controlled by ``pod``, by name."""
        keys = sorted(self.special_claims.get(pod.metadata.uid, ()))
        return [self.claims[k] for k in keys if k in self.claims]

    def _refresh_usage(self, key: ClaimKey) -> None:
        """Recount the claim's devices: its own allocation, else an assumed one, else none."""
        claim = self.claims.get(key)
        allocation = claim.status.allocation if claim is not None else None
        if allocation is None:
            pending = self.assumed.claims.get(key)
            if pending is not None and (claim is None or claim.metadata.uid == pending.claim_uid):
                allocation = pending.allocation
        current = self._usage.get(key)
        if current is not None and allocation is not None and current[0] == allocation:
            if current[0] is not allocation:
                self._usage[key] = (allocation, current[1])
            return
        if current is not None:
            del self._usage[key]
            self.ledger.remove(current[1])
            self.devices.devices_changed(current[1].devices(), released=True)
        if allocation is not None:
            contrib = contribution(allocation)
            self._usage[key] = (allocation, contrib)
            self.ledger.add(contrib)
            self.devices.devices_changed(contrib.devices(), released=False)

    # -- classes, slices, taint rules -------------------------------------------------------------
    def upsert_class(self, cls: DeviceClass) -> ClusterEvent | None:
        old = self.classes.get(cls.metadata.name)
        self.classes[cls.metadata.name] = cls
        self.extended.apply(cls)
        self.devices.classes_changed()
        action = ActionType.ADD if old is None else ActionType.UPDATE_OTHER
        return ClusterEvent(EventResource.DEVICE_CLASS, action, old, cls)

    def delete_class(self, name: str) -> ClusterEvent | None:
        old = self.classes.pop(name, None)
        if old is None:
            return None
        self.extended.delete(name)
        self.devices.classes_changed()
        return ClusterEvent(EventResource.DEVICE_CLASS, ActionType.DELETE, old, None)

    def upsert_slice(self, slc: ResourceSlice) -> ClusterEvent | None:
        name = slc.metadata.name
        old = self.slices.get(name)
        if old is not None:
            self._pool_slices.get(_pool(old), set()).discard(name)
        self.slices[name] = slc
        self._pool_slices.setdefault(_pool(slc), set()).add(name)
        self.devices.slices_changed(self._affected(old, slc), {name: self._effective(slc)})
        action = ActionType.ADD if old is None else ActionType.UPDATE_OTHER
        return ClusterEvent(EventResource.RESOURCE_SLICE, action, old, slc)

    def delete_slice(self, name: str) -> ClusterEvent | None:
        old = self.slices.pop(name, None)
        if old is None:
            return None
        self._pool_slices.get(_pool(old), set()).discard(name)
        self.devices.slices_changed(self._affected(old, None), {name: None})
        return ClusterEvent(EventResource.RESOURCE_SLICE, ActionType.DELETE, old, None)

    def upsert_taint_rule(self, rule: DeviceTaintRule) -> ClusterEvent | None:
        old = self.taint_rules.get(rule.metadata.name)
        self.taint_rules[rule.metadata.name] = rule
        self.devices.slices_changed(None)
        action = ActionType.ADD if old is None else ActionType.UPDATE_OTHER
        return ClusterEvent(EventResource.DEVICE_TAINT_RULE, action, old, rule)

    def delete_taint_rule(self, name: str) -> ClusterEvent | None:
        old = self.taint_rules.pop(name, None)
        if old is None:
            return None
        self.devices.slices_changed(None)
        return ClusterEvent(EventResource.DEVICE_TAINT_RULE, ActionType.DELETE, old, None)

    def _affected(self, old: ResourceSlice | None, new: ResourceSlice | None) -> set[str] | None:
        """Nodes whose pool view a slice change can alter (None: every node)."""
        nodes: set[str] = set()
        for slc in (old, new):
            if slc is None:
                continue
            if not slc.spec.node_name:
                return None
            nodes.add(slc.spec.node_name)
            for other in self._pool_slices.get(_pool(slc), ()):
                node = self.slices[other].spec.node_name
                if not node:
                    return None
                nodes.add(node)
        return nodes

    def _effective(self, slc: ResourceSlice) -> ResourceSlice:
        """One slice with the DeviceTaintRules applied (as ``_effective_slices`` gives it)."""
        if not self.taint_rules:
            return slc
        rules = [self.taint_rules[name] for name in sorted(self.taint_rules)]
        return apply_taint_rules([slc], rules)[0]

    def _effective_slices(self) -> list[ResourceSlice]:
        ordered = [self.slices[name] for name in sorted(self.slices)]
        rules = [self.taint_rules[name] for name in sorted(self.taint_rules)]
        return apply_taint_rules(ordered, rules)

    # -- assume / forget ------------------------------------------------------------------------
    def _assumed(self, pod: Pod, node_name: str) -> AssumedPod:
        key = pod_key(pod)
        assumed = self.assumed.pods.get(key)
        if assumed is None or assumed.node_name != node_name:
            if assumed is not None:
                self.forget(key)
            assumed = self.assumed.pods[key] = AssumedPod(pod, node_name)
        return assumed

    def assume_allocations(
        self, pod: Pod, node_name: str, allocations: Sequence[tuple[ResourceClaim, AllocationResult]]
    ) -> None:
        """DRA Reserve: count these allocations as taken until the claims show them."""
        assumed = self._assumed(pod, node_name)
        key = pod_key(pod)
        for claim, allocation in allocations:
            ckey = (claim.metadata.namespace, claim.metadata.name)
            self.assumed.claims[ckey] = PendingAllocation(key, claim.metadata.uid, node_name, allocation)
            if ckey not in assumed.claims:
                assumed.claims.append(ckey)
            self._refresh_usage(ckey)

    def assume_pod(self, pod: Pod, node_name: str) -> None:
        """Count the pod's requests on ``node_name`` until the bound pod comes back."""
        assumed = self._assumed(pod, node_name)
        if not assumed.placed:
            assumed.placed = True
            self._place(pod_key(pod), node_name, PodUsage(pod.metadata.uid, pod_requests(pod), True))

    def forget(self, key: str) -> list[ClusterEvent]:
        """Unreserve: drop what was assumed for the pod; events for the queue (freed room)."""
        events: list[ClusterEvent] = []
        if any([hook(key) for hook in self.forget_hooks]):
            events.append(ClusterEvent(EventResource.NUMERIC, ActionType.UPDATE_OTHER))
        assumed = self.assumed.pods.pop(key, None)
        if assumed is None:
            return events
        for ckey in assumed.claims:
            pending = self.assumed.claims.get(ckey)
            if pending is None or pending.pod_key != key:
                continue
            del self.assumed.claims[ckey]
            self._refresh_usage(ckey)
            claim = self.claims.get(ckey)
            if claim is not None and claim.status.allocation is None:
                # What an informer shows upstream when the assumed claim is restored.
                assumed_claim = _with_allocation(claim, pending.allocation)
                events.append(
                    ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.UPDATE_OTHER, assumed_claim, claim)
                )
        if assumed.placed:
            self._unplace(key, assumed.node_name)
            events.append(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE, assumed.pod, None))
        return events


def _pool(slc: ResourceSlice) -> tuple[str, str]:
    return (slc.spec.driver, slc.spec.pool.name)


def _with_allocation(claim: ResourceClaim, allocation: AllocationResult) -> ResourceClaim:
    status = msgspec.structs.replace(claim.status, allocation=allocation)
    return msgspec.structs.replace(claim, status=status)
