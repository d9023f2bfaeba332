"""The simulation's snapshot: a ClusterState of its own, built from objects (the log folded to a
sequence), and the pods the scheduler still has to place, in its queue's order."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from draflow.events.api.classic_pod import pod_claims
from draflow.events.api.core_v1 import Node, Pod
from draflow.events.api.resource_v1 import DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice
from draflow.services.dra.resourceclaim import is_pod_done
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.config import SchedulerConfig
from draflow.services.scheduler.framework.profile import Profile
from draflow.services.scheduler.framework.simulation import Simulation
from draflow.services.scheduler.plugins import default_plugins
from draflow.services.scheduler.plugins.classic import ClassicDynamicResources
from draflow.services.scheduler.plugins.numeric import NumericResources
from draflow.services.scheduler.plugins.numeric.simulation import feed

# what the ClusterState keeps itself (an unchanged upsert returns None too)
_CLUSTER_TYPES = (Pod, Node, ResourceClaim, ResourceSlice, DeviceClass, DeviceTaintRule)

__all__ = ["CLASSIC_REASON", "is_pending", "new_simulation", "queue_order", "uses_classic_claims"]

CLASSIC_REASON = (
    "uses classic DRA claims (opaque parameters): only their driver can allocate them, "
    "so they cannot be simulated"
)


def uses_classic_claims(pod: Pod) -> bool:
    return pod_claims(pod) is not None


def simulation_plugins() -> list[object]:
    """The scheduler's default profile without the classic (KEP-3063) plugin: opaque parameters
    cannot be simulated, which is why KEP-4381 exists; such pods are reported, not placed."""
    return [p for p in default_plugins() if not isinstance(p, ClassicDynamicResources)]


def new_simulation(objects: Iterable[object], config: SchedulerConfig | None = None) -> Simulation:
    """A simulation over a fresh ClusterState holding ``objects`` (nodes, pods, claims, classes,
    slices, taint rules); the numeric plugin's books take ResourceClasses, classic claims,
    NodeResourceCapacity objects and vendor parameter objects (KEP-4381 numeric parameters)."""
    config = config if config is not None else SchedulerConfig()
    cluster = ClusterState(config.features)
    plugins = simulation_plugins()
    numeric = [p for p in plugins if isinstance(p, NumericResources)]
    others: list[object] = []
    for obj in objects:
        if cluster.upsert(obj) is None and not isinstance(obj, _CLUSTER_TYPES):
            others.append(obj)
    for plugin in numeric:
        feed(plugin.books, others)
    return Simulation(cluster, Profile(plugins), config)


def is_pending(pod: Pod, scheduler_name: str = "default-scheduler") -> bool:
    """A pod the scheduler still has to place: no node, not done, not being deleted, ours."""
    return (
        not pod.spec.node_name
        and not is_pod_done(pod)
        and pod.metadata.deletion_timestamp is None
        and pod.spec.scheduler_name in ("", scheduler_name)
    )


def queue_order(pods: Sequence[Pod]) -> list[Pod]:
    """The scheduling queue's order: priority, then the oldest first (creation time), then name."""
    return sorted(
        pods,
        key=lambda p: (
            -(p.spec.priority or 0),
            p.metadata.creation_timestamp or "",
            p.metadata.namespace,
            p.metadata.name,
        ),
    )
