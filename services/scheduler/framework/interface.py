"""Plugin extension points and the per-cycle state, after kube-scheduler's framework.

A plugin is an object with a ``name`` and any of the methods below; the profile sorts plugins
into extension points by which methods they have. Hot-path methods return ``None`` for success.

Filter is split for speed: ``filter`` must be cheap (it runs for every node sampled); a plugin
whose exact answer is expensive (dynamicresources: the allocator) makes ``filter`` a necessary
condition and implements ``filter_deferred`` for the exact answer. The framework scores the
nodes that passed every cheap filter and asks ``filter_deferred`` in score order until a node
passes, so the expensive check runs on one node in the common case. Score plugins must
therefore score from what the cheap filters computed (``CycleState.data``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from draflow.events.api.core_v1 import Pod
from draflow.services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.framework.status import QueueingHint, Status

if TYPE_CHECKING:
    from draflow.services.dra.resourceclaim import ClaimRef
    from draflow.services.scheduler.framework.cluster import ClusterState
    from draflow.services.scheduler.framework.config import SchedulerConfig
    from draflow.services.scheduler.framework.decisions import ClaimBinding

__all__ = [
    "MAX_NODE_SCORE",
    "BatchFilterPlugin",
    "CycleState",
    "EventRegistration",
    "FilterPlugin",
    "HintFn",
    "Plugin",
    "PostFilterOutcome",
    "PostFilterPlugin",
    "PreBindPlugin",
    "PreEnqueuePlugin",
    "PreFilterPlugin",
    "ReservePlugin",
    "ScorePlugin",
]

MAX_NODE_SCORE = 100

HintFn = Callable[[Pod, ClusterEvent, "ClusterState"], QueueingHint]


@dataclass(frozen=True, slots=True)
class EventRegistration:
    """A cluster event that may make a pod this plugin rejected schedulable, with an optional
    hint deciding per pod and event (None: always requeue).

    ``narrow`` (optional) names the only waiting pods the hint can requeue for an event: it
    returns a key, and only pods whose ``queue_keys`` (a method of the plugin) include that key
    are asked; None means every pod the plugin rejected. This keeps requeueing proportional to
    the pods concerned instead of the whole unschedulable pool."""

    resource: EventResource
    actions: ActionType
    hint: HintFn | None = None
    narrow: Callable[[ClusterEvent], str | None] | None = None


class CycleState:
    """Everything one scheduling cycle shares between plugins (upstream ``CycleState``)."""

    __slots__ = ("cluster", "config", "data", "pod", "skip_filter", "skip_score")

    def __init__(self, pod: Pod, cluster: ClusterState, config: SchedulerConfig) -> None:
        self.pod = pod
        self.cluster = cluster
        self.config = config
        self.data: dict[str, Any] = {}
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()


@dataclass(frozen=True, slots=True)
class PostFilterOutcome:
    """PostFilter's status plus what it asks for: a claim to deallocate (the reallocation saga) or a
    stale special extended-resource claim to delete."""

    status: Status
    deallocate: ClaimRef | None = None
    delete_claim: ClaimRef | None = None  # KEP-5004: a stale special claim to delete
    deallocate_numeric: ClaimRef | None = None  # KEP-4381: a numeric (classic) claim to free


@runtime_checkable
class Plugin(Protocol):
    name: str

    def events_to_register(self) -> list[EventRegistration]: ...


@runtime_checkable
class PreEnqueuePlugin(Protocol):
    name: str

    def pre_enqueue(self, pod: Pod, cluster: ClusterState) -> Status | None: ...


@runtime_checkable
class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(self, state: CycleState, pod: Pod) -> Status | None:
        """None to continue; SKIP to skip this plugin's Filter/Score for the pod; a rejection."""
        ...


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None: ...


@runtime_checkable
class BatchFilterPlugin(Protocol):
    """Optional fast path of a FilterPlugin: filter many nodes in one call. Returns the nodes
    that pass, in the given order, and appends ``(node, status)`` for the others (statuses must
    name the plugin). Same outcome as calling ``filter`` per node."""

    name: str

    def filter_batch(
        self, state: CycleState, pod: Pod, nodes: list[NodeInfo], rejected: list[tuple[NodeInfo, Status]]
    ) -> list[NodeInfo]: ...


@runtime_checkable
class DeferredFilterPlugin(Protocol):
    name: str

    def wants_deferred(self, state: CycleState) -> bool: ...

    def filter_deferred(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None: ...


@runtime_checkable
class PostFilterPlugin(Protocol):
    name: str

    def post_filter(
        self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]
    ) -> PostFilterOutcome: ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: str
    weight: int

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int: ...

    def normalize(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        """Rewrite ``scores`` (node name -> raw score) into [0, MAX_NODE_SCORE] in place.

        Optional extras a scorer may define: ``score_nodes(state, pod, nodes) -> dict`` (batch
        form of ``score``) and ``node_order(state, pod, nodes, start)`` (nodes best-first, so
        the framework can stop at the first feasible one; see ``cycle.py``)."""
        ...


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None: ...

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None: ...


@runtime_checkable
class PreBindPlugin(Protocol):
    name: str

    def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> list[ClaimBinding]:
        """What PreBind must write (the saga appends it); computed at the end of the cycle."""
        ...
