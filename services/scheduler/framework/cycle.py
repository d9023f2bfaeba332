"""One scheduling cycle: PreFilter → Filter → (PostFilter) → Score → select host → Reserve.

``schedule_one(pod, cluster, profile, config)`` is a pure function of the pod, the cluster
state (including what earlier cycles assumed) and the configuration; its only side effect is
Reserve's entry in the assume cache. Node sampling follows kube-scheduler: walk the nodes (in
name order) from a start offset until ``num_feasible_nodes_to_find`` nodes passed the filters,
score those, take the best. Differences, all for determinism or speed (docs/scheduler.md):

* the start offset is a stable hash of the pod UID, not a counter carried between cycles, so a
  decision does not depend on how many pods were scheduled before;
* among equal scores the node met first in that walk wins (upstream picks randomly);
* expensive filters (the allocator) are deferred: nodes passing the cheap filters are scored
  and the deferred filter runs in score order until one node passes; if none does, the walk
  continues with the next batch, so an unschedulable pod is diagnosed on every node. A deferred
  filter that may fail with an error on some of the filtered nodes names them (``suspects``:
  the allocator on nodes where a selector fails on a device); it runs there too before a node is
  chosen, so an error that upstream's Filter (which runs on every node it samples) reports still
  aborts the attempt.

A Filter error aborts the attempt with upstream's message, ``running "<plugin>" filter plugin:
<error>``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from draflow.events.api.core_v1 import Pod
from draflow.events.dra import MAX_NODE_NAMES, RequestDiagnosis
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.config import SchedulerConfig, num_feasible_nodes_to_find
from draflow.services.scheduler.framework.decisions import (
    PodRef,
    Reserved,
    ScheduleResult,
    SchedulingError,
    Unschedulable,
)
from draflow.services.scheduler.framework.diagnosis import NO_NODES_MESSAGE, Diagnosis
from draflow.services.scheduler.framework.interface import (
    CycleState,
    DeferredFilterPlugin,
    FilterPlugin,
    ReservePlugin,
    ScorePlugin,
)
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.framework.profile import Profile
from draflow.services.scheduler.framework.status import Code, Status

__all__ = ["HostChoice", "check_node", "schedule_one", "select_host", "start_index"]


def start_index(pod: Pod, num_nodes: int) -> int:
    """Where the node walk starts for this pod: a stable hash of its UID (or namespace/name)."""
    meta = pod.metadata
    who = meta.uid or f"{meta.namespace}/{meta.name}"
    return zlib.crc32(who.encode()) % num_nodes if num_nodes else 0


@dataclass(frozen=True, slots=True)
class HostChoice:
    """Where the filters and scores put the pod, before Reserve: the cycle state (what Filter
    computed for the chosen node), the node, and how many nodes were evaluated / feasible."""

    state: CycleState
    node_name: str
    evaluated: int
    feasible: int


def schedule_one(
    pod: Pod, cluster: ClusterState, profile: Profile, config: SchedulerConfig
) -> ScheduleResult:
    """Run one cycle for ``pod``; on Reserved the decision is already in the assume cache."""
    choice = select_host(pod, cluster, profile, config)
    if not isinstance(choice, HostChoice):
        return choice
    return _reserve(
        choice.state, profile, pod, PodRef.of(pod), choice.node_name, choice.evaluated, choice.feasible
    )


def select_host(
    pod: Pod,
    cluster: ClusterState,
    profile: Profile,
    config: SchedulerConfig,
    state: CycleState | None = None,
) -> HostChoice | Unschedulable | SchedulingError:
    """PreFilter, Filter, (PostFilter), Score: the node the cycle picks, without Reserve.
    ``state``: a prepared cycle state (``draflow simulate`` hands one carrying its snapshot)."""
    ref = PodRef.of(pod)
    nodes = cluster.node_list()
    num_nodes = len(nodes)
    if num_nodes == 0:
        return SchedulingError(ref, NO_NODES_MESSAGE)
    if state is None:
        state = CycleState(pod, cluster, config)
    diagnosis = Diagnosis()

    for plugin in profile.pre_filter:
        status = plugin.pre_filter(state, pod)
        if status is None:
            continue
        if status.code == Code.SKIP:
            state.skip_filter.add(plugin.name)
            state.skip_score.add(plugin.name)
            continue
        status = status.with_plugin(plugin.name)
        if not status.rejected:
            return SchedulingError(ref, status.message, plugin.name)
        diagnosis.pre_filter_message = status.message
        diagnosis.unschedulable_plugins.add(plugin.name)
        for node in nodes:
            diagnosis.node_statuses[node.name] = status
        return _unschedulable(state, profile, diagnosis, num_nodes)

    filters = [p for p in profile.filter if p.name not in state.skip_filter]
    deferred = [p for p in profile.deferred if p.name not in state.skip_filter and p.wants_deferred(state)]
    scorers = [p for p in profile.score if p.name not in state.skip_score]
    start = start_index(pod, num_nodes)

    if len(scorers) == 1:
        # One scorer that can list nodes best-first: the first node passing every filter wins.
        node_order = getattr(scorers[0], "node_order", None)
        order = node_order(state, pod, nodes, start) if node_order is not None else None
        if order is not None:
            found, walked = _first_fit(order, filters, deferred, state, pod)
            if isinstance(found, SchedulingError):
                return found
            if found is not None:
                failed = _check_suspects(deferred, state, pod, {found.name})
                if failed is not None:
                    return failed
                return HostChoice(state, found.name, walked, 1)
            # Nothing fits best-first: the walk below diagnoses every node.

    # Nothing to score: the first feasible node in walk order wins any sample, so look at growing
    # chunks and stop at the first fit. Otherwise sample like kube-scheduler.
    batch = num_feasible_nodes_to_find(config, num_nodes) if scorers else 1
    chunk_size = batch if scorers else 8
    pos = 0
    feasible = 0
    chosen: NodeInfo | None = None
    tried: set[str] = set()  # nodes the deferred filters ran on
    while chosen is None and pos < num_nodes:
        candidates: list[NodeInfo] = []
        while pos < num_nodes and len(candidates) < batch:
            size = min(chunk_size, batch - len(candidates)) if scorers else chunk_size
            end = min(num_nodes, pos + size)
            chunk = [nodes[(start + i) % num_nodes] for i in range(pos, end)]
            pos = end
            if not scorers:
                chunk_size = min(chunk_size * 4, 512)
            passed = _filter_chunk(filters, state, pod, chunk, diagnosis)
            if isinstance(passed, SchedulingError):
                return passed
            candidates.extend(passed)
        if not candidates:
            break
        ranked = _rank(state, pod, candidates, scorers)
        if not deferred:
            chosen = ranked[0]
            feasible += len(candidates)
            break
        for node in ranked:
            status = _run_deferred(deferred, state, pod, node)
            tried.add(node.name)
            if status is None:
                chosen = node
                break
            if status.code == Code.ERROR:
                return _filter_error(pod, status)
            diagnosis.reject_node(node.name, status)
        feasible += len(candidates)
    if deferred:
        failed = _check_suspects(deferred, state, pod, tried)
        if failed is not None:
            return failed
    if chosen is None:
        return _unschedulable(state, profile, diagnosis, num_nodes)
    return HostChoice(state, chosen.name, pos, feasible)


def check_node(pod: Pod, state: CycleState, profile: Profile, node: NodeInfo) -> Status | None:
    """PreFilter, then every Filter (cheap and deferred) on one node: None when the pod fits
    there, else the first rejection or error (Cluster Autoscaler's predicate check of a pod
    against one, possibly fictional, node)."""
    for plugin in profile.pre_filter:
        status = plugin.pre_filter(state, pod)
        if status is None:
            continue
        if status.code == Code.SKIP:
            state.skip_filter.add(plugin.name)
            continue
        return status.with_plugin(plugin.name)
    filters = [p for p in profile.filter if p.name not in state.skip_filter]
    status = _run_filters(filters, state, pod, node)
    if status is not None:
        return status
    deferred = [p for p in profile.deferred if p.name not in state.skip_filter and p.wants_deferred(state)]
    return _run_deferred(deferred, state, pod, node)


def _filter_error(pod: Pod, status: Status) -> SchedulingError:
    """A Filter plugin failed with an error (not a rejection): the attempt is aborted with the
    message upstream's framework gives it (``running "<plugin>" filter plugin: <error>``)."""
    message = (
        f'running "{status.plugin}" filter plugin: {status.message}' if status.plugin else status.message
    )
    return SchedulingError(PodRef.of(pod), message, status.plugin)


def _check_suspects(
    deferred: Sequence[DeferredFilterPlugin], state: CycleState, pod: Pod, tried: set[str]
) -> SchedulingError | None:
    """Run the deferred filters on the nodes they may fail on with an error (``suspects``) that
    were not tried yet; the first error aborts the attempt, as upstream's Filter on that node
    would have."""
    for plugin in deferred:
        suspects = getattr(plugin, "suspects", None)
        if suspects is None:
            continue
        for node in suspects(state):
            if node.name in tried:
                continue
            tried.add(node.name)
            status = plugin.filter_deferred(state, pod, node)
            if status is not None and status.code == Code.ERROR:
                return _filter_error(pod, status if status.plugin else status.with_plugin(plugin.name))
    return None


def _filter_chunk(
    filters: Sequence[FilterPlugin],
    state: CycleState,
    pod: Pod,
    chunk: list[NodeInfo],
    diagnosis: Diagnosis,
) -> list[NodeInfo] | SchedulingError:
    """Run the cheap filters plugin by plugin over a chunk of nodes (same outcome as node by node:
    each node is attributed to the first plugin rejecting it); survivors keep walk order."""
    survivors = chunk
    rejected: list[tuple[NodeInfo, Status]] = []
    for plugin in filters:
        if not survivors:
            break
        batch = getattr(plugin, "filter_batch", None)
        if batch is not None:
            survivors = batch(state, pod, survivors, rejected)
            continue
        kept: list[NodeInfo] = []
        for node in survivors:
            status = plugin.filter(state, pod, node)
            if status is None:
                kept.append(node)
            else:
                rejected.append((node, status if status.plugin else status.with_plugin(plugin.name)))
        survivors = kept
    for node, status in rejected:
        if status.code == Code.ERROR:
            return _filter_error(pod, status)
        diagnosis.reject_node(node.name, status)
    return survivors


def _first_fit(
    order: Iterable[NodeInfo],
    filters: Sequence[FilterPlugin],
    deferred: Sequence[DeferredFilterPlugin],
    state: CycleState,
    pod: Pod,
) -> tuple[NodeInfo | SchedulingError | None, int]:
    """The first node of ``order`` passing the cheap, then the deferred filters, and how many
    nodes were looked at."""
    walked = 0
    for node in order:
        walked += 1
        status = _run_filters(filters, state, pod, node)
        if status is None and deferred:
            status = _run_deferred(deferred, state, pod, node)
        if status is None:
            return node, walked
        if status.code == Code.ERROR:
            return _filter_error(pod, status), walked
    return None, walked


def _run_filters(
    plugins: Sequence[FilterPlugin], state: CycleState, pod: Pod, node: NodeInfo
) -> Status | None:
    for plugin in plugins:
        status = plugin.filter(state, pod, node)
        if status is not None:
            return status if status.plugin else status.with_plugin(plugin.name)
    return None


def _run_deferred(
    plugins: Sequence[DeferredFilterPlugin], state: CycleState, pod: Pod, node: NodeInfo
) -> Status | None:
    for plugin in plugins:
        status = plugin.filter_deferred(state, pod, node)
        if status is not None:
            return status if status.plugin else status.with_plugin(plugin.name)
    return None


def _rank(
    state: CycleState, pod: Pod, candidates: list[NodeInfo], scorers: Sequence[ScorePlugin]
) -> list[NodeInfo]:
    """Candidates by total weighted score, best first; ties keep walk order."""
    if not scorers or len(candidates) == 1:
        return candidates
    totals: dict[str, int] | None = None
    for plugin in scorers:
        batch = getattr(plugin, "score_nodes", None)
        if batch is not None:
            scores = batch(state, pod, candidates)
        else:
            scores = {node.name: plugin.score(state, pod, node) for node in candidates}
        if len(scorers) > 1:
            # Normalizing is monotone; it only matters when scores of plugins are added up.
            plugin.normalize(state, pod, scores)
        weight = plugin.weight
        if totals is None:
            totals = scores if weight == 1 else {name: weight * value for name, value in scores.items()}
        else:
            for name, value in scores.items():
                totals[name] += weight * value
    assert totals is not None
    return sorted(candidates, key=lambda n: -totals[n.name])


def _unschedulable(
    state: CycleState, profile: Profile, diagnosis: Diagnosis, num_nodes: int
) -> Unschedulable:
    pod = state.pod
    deallocate = None
    delete_claim = None
    deallocate_numeric = None
    messages: list[str] = []
    for plugin in profile.post_filter:
        outcome = plugin.post_filter(state, pod, diagnosis.node_statuses)
        if outcome.status.message:
            messages.append(outcome.status.message)
        if outcome.deallocate is not None and deallocate is None:
            deallocate = outcome.deallocate
        if outcome.delete_claim is not None and delete_claim is None:
            delete_claim = outcome.delete_claim
        if outcome.deallocate_numeric is not None and deallocate_numeric is None:
            deallocate_numeric = outcome.deallocate_numeric
    diagnosis.post_filter_message = ", ".join(messages)
    requests: tuple[RequestDiagnosis, ...] = ()
    for candidate in profile.plugins:
        explain = getattr(candidate, "request_diagnosis", None)
        if explain is not None:
            requests += explain(state, pod, diagnosis.node_statuses)
    return Unschedulable(
        pod=PodRef.of(pod),
        message=diagnosis.message(num_nodes),
        num_nodes=num_nodes,
        node_reasons=tuple(diagnosis.histogram()),
        reason_nodes=diagnosis.nodes_by_reason(MAX_NODE_NAMES),
        unschedulable_plugins=frozenset(diagnosis.unschedulable_plugins),
        plugin_reasons=diagnosis.plugin_reasons(),
        pre_filter_message=diagnosis.pre_filter_message,
        post_filter_message=diagnosis.post_filter_message,
        deallocate=deallocate,
        delete_claim=delete_claim,
        deallocate_numeric=deallocate_numeric,
        requests=requests,
    )


def _reserve(
    state: CycleState,
    profile: Profile,
    pod: Pod,
    ref: PodRef,
    node_name: str,
    evaluated: int,
    feasible: int,
) -> ScheduleResult:
    done: list[ReservePlugin] = []
    for plugin in profile.reserve:
        status = plugin.reserve(state, pod, node_name)
        if status is not None:
            for undo in reversed(done):
                undo.unreserve(state, pod, node_name)
            plugin.unreserve(state, pod, node_name)
            state.cluster.forget(ref.key)
            if status.code == Code.PENDING:
                return _reserve_pending(ref, node_name, status.with_plugin(plugin.name))
            return SchedulingError(ref, status.message, plugin.name)
        done.append(plugin)
    state.cluster.assume_pod(pod, node_name)
    bindings = tuple(b for plugin in profile.pre_bind for b in plugin.pre_bind(state, pod, node_name))
    extended = None
    for binder in profile.pre_bind:  # KEP-5004: the special claim PreBind creates (if any)
        extended_claim = getattr(binder, "extended_claim", None)
        if extended is None and extended_claim is not None:
            extended = extended_claim(state, pod, node_name)
    numeric = tuple(
        plan
        for plugin in profile.plugins
        if (plans := getattr(plugin, "numeric_plans", None)) is not None
        for plan in plans(state, pod, node_name)
    )
    return Reserved(
        ref,
        node_name,
        bindings,
        extended,
        evaluated_nodes=evaluated,
        feasible_nodes=feasible,
        numeric=numeric,
    )


def _reserve_pending(ref: PodRef, node_name: str, status: Status) -> Unschedulable:
    """A Reserve plugin waits: Unschedulable on the chosen node, as upstream's FitError with
    ``NumAllNodes: 1`` for a rejected Reserve ("0/1 nodes are available: 1 <reason>.")."""
    diagnosis = Diagnosis()
    diagnosis.reject_node(node_name, status)
    return Unschedulable(
        pod=ref,
        message=diagnosis.message(1),
        num_nodes=1,
        node_reasons=tuple(diagnosis.histogram()),
        reason_nodes=diagnosis.nodes_by_reason(MAX_NODE_NAMES),
        unschedulable_plugins=frozenset((status.plugin,)),
        plugin_reasons=diagnosis.plugin_reasons(),
    )
