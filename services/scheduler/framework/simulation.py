"""Cluster Autoscaler's view of the scheduler (KEP-4381, "Simulation with CA").

An autoscaler asks "would these pending pods fit if these nodes existed, and can that node go?"
without writing anything. It runs the scheduler's own PreFilter and Filter plugins against a
snapshot of the cluster and, instead of Reserve and Bind, tells the plugins that keep state of
their own (DRA: which devices claims hold) what it decided, through the KEP's
``ClusterAutoScalerPlugin`` interface:

* ``start_simulation(state)``: the plugin snapshots what it needs into ``state``, the
  simulation's cycle state; its presence tells the other extension points they run simulated;
* PreFilter / Filter: unchanged plugin code, deciding against that snapshot;
* ``simulate_bind_pod(state, pod, node)``: the pod goes to ``node``: claims get allocated in the
  snapshot when first used (a shared claim once), the pod is added to their ``reservedFor``;
* ``simulate_evict_pod(state, pod, node_name)``: the pod leaves its node: it is dropped from its
  claims' ``reservedFor``, claims nobody else uses are deallocated.

:class:`Simulation` is the autoscaler's side (upstream's ClusterSnapshot plus the calls above):
it owns a :class:`ClusterState` built for it alone, places and removes pods and nodes in it, and
can return to a checkpoint. Pure: nothing is appended or published.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import msgspec

from draflow.events.api.core_v1 import Node, Pod, PodSpec
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.resource_v1 import ResourceClaim, ResourceSlice
from draflow.services.scheduler.framework.assume import ClaimKey
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.config import SchedulerConfig
from draflow.services.scheduler.framework.cycle import HostChoice, check_node, select_host
from draflow.services.scheduler.framework.decisions import SchedulingError, Unschedulable
from draflow.services.scheduler.framework.interface import (
    CycleState,
    DeferredFilterPlugin,
    FilterPlugin,
    PreFilterPlugin,
)
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.framework.profile import Profile
from draflow.services.scheduler.framework.status import Code, Status

__all__ = [
    "SIMULATION",
    "CapacityPlugin",
    "Checkpoint",
    "ClusterAutoScalerPlugin",
    "DecidingPlugin",
    "Simulation",
    "SimulationError",
    "bound",
    "decide_again",
    "reserved_with",
    "reserved_without",
    "unbound",
]

# Key in CycleState.data, present while plugins run inside a simulation (upstream: the DRA
# plugin finds its snapshot in the cycle state and knows it serves the autoscaler).
SIMULATION = "ClusterAutoscaler"

_NO_POD = Pod(metadata=ObjectMeta(name="", namespace=""), spec=PodSpec(containers=()))


@runtime_checkable
class ClusterAutoScalerPlugin(Protocol):
    """KEP-4381's ``ClusterAutoScalerPlugin``. Implemented by ``DynamicResources`` (structured
    parameters and extended resources backed by DRA) and ``NumericResources`` (numeric models
    over NodeResourceCapacity). Return None for success."""

    name: str

    def start_simulation(self, state: CycleState) -> Status | None: ...

    def simulate_bind_pod(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None: ...

    def simulate_evict_pod(self, state: CycleState, pod: Pod, node_name: str) -> Status | None: ...


@runtime_checkable
class CapacityPlugin(Protocol):
    """A simulation plugin that keeps node capacity objects of its own (numeric parameters:
    NodeResourceCapacity), so fictional nodes can bring clones of them."""

    def simulate_add_capacity(self, state: CycleState, obj: object) -> bool: ...

    def simulate_remove_capacity(self, state: CycleState, name: str) -> None: ...


class SimulationError(Exception):
    """A plugin refused to start a simulation (its snapshot cannot be taken)."""


def bound(pod: Pod, node_name: str) -> Pod:
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name=node_name))


def unbound(pod: Pod) -> Pod:
    """The pod as a pending one (an evicted pod looks for a new node)."""
    return bound(pod, "") if pod.spec.node_name else pod


class DecidingPlugin(PreFilterPlugin, FilterPlugin, DeferredFilterPlugin, Protocol):
    """A plugin that decides again in SimulateBindPod (both DRA plugins)."""


def decide_again(
    plugin: DecidingPlugin, sim: CycleState, pod: Pod, node: NodeInfo
) -> CycleState | Status | None:
    """SimulateBindPod's first half: the plugin's own PreFilter and Filter (deferred part too) for
    ``pod`` on ``node`` again, in a cycle state of its own seeded from the simulation's (the KEP
    hands the plugin the simulation's state, not the one Filter filled: the same code on the same
    snapshot gives the same answer). The state it decided in (what it chose is there to write into
    the snapshot), the failure, or None when PreFilter skipped the pod (nothing of the plugin's)."""
    state = CycleState(pod, sim.cluster, sim.config)
    state.data.update(sim.data)
    status = plugin.pre_filter(state, pod)
    if status is not None:
        return None if status.code == Code.SKIP else status
    status = plugin.filter(state, pod, node)
    if status is None and plugin.wants_deferred(state):
        status = plugin.filter_deferred(state, pod, node)
    return state if status is None else status


class _Consumer(Protocol):
    @property
    def uid(self) -> str: ...


C = TypeVar("C", bound=_Consumer)


def reserved_with(reserved: tuple[C, ...], consumer: C) -> tuple[C, ...]:
    """``reservedFor`` with ``consumer`` in it (once: a shared claim gains a consumer)."""
    return reserved if any(r.uid == consumer.uid for r in reserved) else (*reserved, consumer)


def reserved_without(reserved: tuple[C, ...], uid: str) -> tuple[C, ...] | None:
    """``reservedFor`` without the pod ``uid``; None when the pod was not in it."""
    left = tuple(r for r in reserved if r.uid != uid)
    return None if len(left) == len(reserved) else left


def _copy(value: Any) -> Any:
    copy = getattr(value, "copy", None)
    return copy() if copy is not None else value


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The snapshot's objects and the plugins' simulation data at one moment (for ``revert``)."""

    nodes: dict[str, Node]
    pods: dict[str, Pod]
    claims: dict[ClaimKey, ResourceClaim]
    slices: dict[str, ResourceSlice]
    data: dict[str, Any]


class Simulation:
    """One simulation over ``cluster``: a ClusterState built for it alone (never a live
    scheduler's; the pods and claims it holds change as the simulation binds and evicts)."""

    def __init__(self, cluster: ClusterState, profile: Profile, config: SchedulerConfig) -> None:
        self.cluster = cluster
        self.profile = profile
        self.config = config
        self.state = CycleState(_NO_POD, cluster, config)
        self.state.data[SIMULATION] = True
        self.plugins = [p for p in profile.plugins if isinstance(p, ClusterAutoScalerPlugin)]
        for plugin in self.plugins:
            status = plugin.start_simulation(self.state)
            if status is not None:
                raise SimulationError(f"{plugin.name}: {status.message}")

    # -- deciding ---------------------------------------------------------------------------------
    def cycle_state(self, pod: Pod) -> CycleState:
        """A cycle state for one pod carrying the simulation's snapshot (upstream: a clone of the
        state handed to StartSimulation)."""
        state = CycleState(pod, self.cluster, self.config)
        state.data.update(self.state.data)
        return state

    def pre_enqueue(self, pod: Pod) -> Status | None:
        """Why the scheduler would not even try the pod (gates, missing claims), or None."""
        for plugin in self.profile.pre_enqueue:
            status = plugin.pre_enqueue(pod, self.cluster)
            if status is not None:
                return status if status.plugin else status.with_plugin(plugin.name)
        return None

    def schedule(self, pod: Pod) -> HostChoice | Unschedulable | SchedulingError:
        """The node the scheduler would pick among the snapshot's nodes (its filters and scores)."""
        return select_host(pod, self.cluster, self.profile, self.config, self.cycle_state(pod))

    def fits(self, pod: Pod, node_name: str) -> Status | None:
        """Whether the pod passes PreFilter and every Filter on this one node (None: it fits)."""
        return check_node(pod, self.cycle_state(pod), self.profile, self.cluster.nodes[node_name])

    # -- changing the snapshot --------------------------------------------------------------------
    def bind(self, pod: Pod, node_name: str) -> Status | None:
        """SimulateBindPod on every plugin, then the pod counts on the node."""
        node = self.cluster.nodes[node_name]
        for plugin in self.plugins:
            status = plugin.simulate_bind_pod(self.state, pod, node)
            if status is not None:
                return status if status.plugin else status.with_plugin(plugin.name)
        self.cluster.upsert_pod(bound(pod, node_name))
        return None

    def evict(self, pod: Pod) -> Status | None:
        """SimulateEvictPod on every plugin, then the pod no longer counts on its node."""
        node_name = pod.spec.node_name
        for plugin in self.plugins:
            status = plugin.simulate_evict_pod(self.state, pod, node_name)
            if status is not None:
                return status if status.plugin else status.with_plugin(plugin.name)
        self.cluster.delete_pod(pod.metadata.namespace, pod.metadata.name)
        return None

    def add_node(
        self, node: Node, slices: Iterable[ResourceSlice], capacities: Iterable[object] = ()
    ) -> None:
        """A node joins with its slices and the capacity objects plugins keep themselves
        (KEP-4381 NodeResourceCapacity: handed to each ``CapacityPlugin`` that takes it)."""
        self.cluster.upsert_node(node)
        for slc in slices:
            self.cluster.upsert_slice(slc)
        takers = [p for p in self.plugins if isinstance(p, CapacityPlugin)]
        for obj in capacities:
            if not any(p.simulate_add_capacity(self.state, obj) for p in takers):
                raise SimulationError(f"no plugin keeps {type(obj).__name__} objects")

    def remove_node(self, name: str, slices: Iterable[str] = (), capacities: Iterable[str] = ()) -> None:
        """The node leaves (its pods must have been evicted); ``slices`` and ``capacities``: names
        to drop with it (a fictional node's; a real node's stay, as they would until its driver
        goes)."""
        self.cluster.delete_node(name)
        for slc in slices:
            self.cluster.delete_slice(slc)
        for cap in capacities:
            for plugin in self.plugins:
                if isinstance(plugin, CapacityPlugin):
                    plugin.simulate_remove_capacity(self.state, cap)

    def pods_on(self, node_name: str) -> list[Pod]:
        """The pods counting on a node, by namespace/name."""
        return [
            self.cluster.pods[key]
            for key in sorted(self.cluster.pods)
            if self.cluster.pods[key].spec.node_name == node_name
        ]

    # -- checkpoints ------------------------------------------------------------------------------
    def checkpoint(self) -> Checkpoint:
        cluster = self.cluster
        return Checkpoint(
            nodes={name: info.node for name, info in cluster.nodes.items()},
            pods=dict(cluster.pods),
            claims=dict(cluster.claims),
            slices=dict(cluster.slices),
            data={k: _copy(v) for k, v in self.state.data.items()},
        )

    def revert(self, cp: Checkpoint) -> None:
        """Back to ``cp``: what changed since is undone object by object (upstream's Revert)."""
        cluster = self.cluster
        for name, node in cp.nodes.items():
            info = cluster.nodes.get(name)
            if info is None or info.node is not node:
                cluster.upsert_node(node)
        for name in [n for n in cluster.nodes if n not in cp.nodes]:
            cluster.delete_node(name)
        for name in [n for n in cluster.slices if n not in cp.slices]:
            cluster.delete_slice(name)
        for name, slc in cp.slices.items():
            if cluster.slices.get(name) is not slc:
                cluster.upsert_slice(slc)
        for key in [k for k in cluster.pods if k not in cp.pods]:
            ns, _, name = key.partition("/")
            cluster.delete_pod(ns, name)
        for pod in cp.pods.values():
            if cluster.pods.get(f"{pod.metadata.namespace}/{pod.metadata.name}") is not pod:
                cluster.upsert_pod(pod)
        for ckey in [k for k in cluster.claims if k not in cp.claims]:
            cluster.delete_claim(*ckey)
        for claim in cp.claims.values():
            if cluster.claims.get((claim.metadata.namespace, claim.metadata.name)) is not claim:
                cluster.upsert_claim(claim)
        self.state.data.clear()
        self.state.data.update({k: _copy(v) for k, v in cp.data.items()})
