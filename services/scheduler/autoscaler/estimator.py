"""What Cluster Autoscaler would conclude, computed with the scheduler's own plugins.

``estimate(sim, pods, groups, remove)``:

1. Each ``--remove-node`` in order (scale-down): the node's pods are evicted (SimulateEvictPod),
   the node leaves the snapshot, and each pod (priority, then name) goes where the scheduler would
   put it among the remaining nodes (SimulateBindPod). The node is removable when every pod
   found a place; otherwise the snapshot returns to where it was before this node was tried.
2. The pods, in queue order (scale-up, Cluster Autoscaler's binpacking estimator): a pod goes
   where the scheduler would put it among the snapshot's nodes, the nodes opened so far
   included; when none fits, a new node of the first group whose template fits the pod is
   opened (``<group>-<i>``, at most the group's maximum) and the pod is bound there. A pod that
   fits nowhere keeps the scheduler's diagnosis as its reason.

Pure: the snapshot is the simulation's own; nothing is written anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from draflow.events.api.core_v1 import Pod
from draflow.services.scheduler.autoscaler.nodegroups import (
    NodeGroup,
    capacity_names,
    instantiate,
    instantiate_capacities,
    slice_names,
)
from draflow.services.scheduler.autoscaler.snapshot import CLASSIC_REASON, uses_classic_claims
from draflow.services.scheduler.framework.cycle import HostChoice
from draflow.services.scheduler.framework.simulation import Simulation, unbound
from draflow.services.scheduler.plugins.dynamicresources.simulation import claims_of
from draflow.services.scheduler.plugins.numeric.simulation import instances_of, opaque_reason

__all__ = ["DeviceResult", "Estimate", "GroupResult", "Move", "PodResult", "RemoveResult", "estimate"]


class DeviceResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    claim: str
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False


class PodResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=False):
    namespace: str
    name: str
    node: str | None
    new_node: bool = False
    node_group: str | None = None
    devices: tuple[DeviceResult, ...] = ()
    reason: str | None = None
    node_group_reasons: dict[str, str] = {}


class GroupResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    new_nodes: int
    max_nodes: int | None
    nodes: tuple[str, ...]
    template: str


class Move(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    namespace: str
    name: str
    node: str | None
    devices: tuple[DeviceResult, ...] = ()
    reason: str | None = None


class RemoveResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    removable: bool
    moves: tuple[Move, ...]


class Estimate(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pods: tuple[PodResult, ...]
    node_groups: dict[str, GroupResult]
    remove_nodes: dict[str, RemoveResult]

    @property
    def fits(self) -> bool:
        """Every pod placed and every node removable (the command's exit code 0)."""
        return all(p.node is not None for p in self.pods) and all(
            r.removable for r in self.remove_nodes.values()
        )


def devices_of(sim: Simulation, pod: Pod) -> tuple[DeviceResult, ...]:
    """The devices the pod's claims hold in the snapshot, claim by claim."""
    out: list[DeviceResult] = []
    for claim in claims_of(pod, sim.cluster):
        allocation = claim.status.allocation
        if allocation is None:
            continue
        name = claim.metadata.name
        for r in allocation.devices.results:
            out.append(
                DeviceResult(
                    claim=name,
                    request=r.request,
                    driver=r.driver,
                    pool=r.pool,
                    device=r.device,
                    admin_access=bool(r.admin_access),
                )
            )
    for claim_name, request, driver, where in instances_of(sim.state, pod):  # numeric claims
        pool, _, instance = where.partition("/")
        out.append(DeviceResult(claim=claim_name, request=request, driver=driver, pool=pool, device=instance))
    return tuple(out)


def _by_priority(pods: Sequence[Pod]) -> list[Pod]:
    return sorted(pods, key=lambda p: (-(p.spec.priority or 0), p.metadata.namespace, p.metadata.name))


def _remove(sim: Simulation, name: str) -> RemoveResult:
    checkpoint = sim.checkpoint()
    pods = sim.pods_on(name)
    moves: list[Move] = []
    for pod in pods:
        status = sim.evict(pod)
        if status is not None:
            sim.revert(checkpoint)
            reason = f"cannot evict: {status.message}"
            return RemoveResult(removable=False, moves=(_move(pod, None, reason=reason),))
    sim.remove_node(name)
    removable = True
    for pod in _by_priority(pods):
        pending = unbound(pod)
        choice = sim.schedule(pending)
        if not isinstance(choice, HostChoice):
            moves.append(_move(pod, None, reason=choice.message))
            removable = False
            continue
        status = sim.bind(pending, choice.node_name)
        if status is not None:
            moves.append(_move(pod, None, reason=status.message))
            removable = False
            continue
        moves.append(_move(pod, choice.node_name, devices_of(sim, pending)))
    if not removable:
        sim.revert(checkpoint)
    return RemoveResult(removable=removable, moves=tuple(moves))


def _move(
    pod: Pod, node: str | None, devices: tuple[DeviceResult, ...] = (), reason: str | None = None
) -> Move:
    meta = pod.metadata
    return Move(namespace=meta.namespace, name=meta.name, node=node, devices=devices, reason=reason)


def _open_node(
    sim: Simulation, pod: Pod, groups: Sequence[NodeGroup]
) -> tuple[NodeGroup | None, str, dict[str, str]]:
    """A new node of the first group whose template fits ``pod``, the pod bound there."""
    reasons: dict[str, str] = {}
    for group in groups:
        if group.full():
            reasons[group.name] = f"node group {group.name} reached its maximum of {group.max_nodes} nodes"
            continue
        name = group.node_name(group.opened + 1)
        node, slices = instantiate(group.template, name)
        capacities = instantiate_capacities(group.template, name)
        sim.add_node(node, slices, capacities)
        status = sim.fits(pod, name)
        if status is None:
            status = sim.bind(pod, name)
        if status is None:
            group.opened += 1
            return group, name, reasons
        sim.remove_node(name, slice_names(slices), capacity_names(capacities))
        reasons[group.name] = status.message
    return None, "", reasons


def _place(sim: Simulation, pod: Pod, groups: Sequence[NodeGroup], opened: dict[str, str]) -> PodResult:
    meta = pod.metadata
    gate = sim.pre_enqueue(pod)
    opaque = opaque_reason(sim.state, pod, CLASSIC_REASON) if uses_classic_claims(pod) else None
    if gate is not None or opaque is not None:
        reason = gate.message if gate is not None else opaque
        return PodResult(namespace=meta.namespace, name=meta.name, node=None, reason=reason)
    choice = sim.schedule(pod)
    if isinstance(choice, HostChoice):
        status = sim.bind(pod, choice.node_name)
        if status is None:
            node = choice.node_name
            return PodResult(
                namespace=meta.namespace,
                name=meta.name,
                node=node,
                new_node=node in opened,
                node_group=opened.get(node),
                devices=devices_of(sim, pod),
            )
        reason = status.message
    else:
        reason = choice.message
    group_found, name, reasons = _open_node(sim, pod, groups)
    if group_found is None:
        return PodResult(
            namespace=meta.namespace, name=meta.name, node=None, reason=reason, node_group_reasons=reasons
        )
    opened[name] = group_found.name
    return PodResult(
        namespace=meta.namespace,
        name=meta.name,
        node=name,
        new_node=True,
        node_group=group_found.name,
        devices=devices_of(sim, pod),
    )


def estimate(
    sim: Simulation, pods: Sequence[Pod], groups: Sequence[NodeGroup], remove: Sequence[str] = ()
) -> Estimate:
    """See the module docstring. ``pods`` in queue order; ``groups`` in the order they are tried."""
    removals = {name: _remove(sim, name) for name in remove}
    opened: dict[str, str] = {}  # new node -> its group
    results = tuple(_place(sim, pod, groups, opened) for pod in pods)
    node_groups = {
        g.name: GroupResult(
            new_nodes=g.opened,
            max_nodes=g.max_nodes,
            nodes=tuple(g.node_name(i) for i in range(1, g.opened + 1)),
            template=g.template.origin,
        )
        for g in groups
    }
    return Estimate(pods=results, node_groups=node_groups, remove_nodes=removals)
