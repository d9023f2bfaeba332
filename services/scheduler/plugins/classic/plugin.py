"""``ClassicDynamicResources``: KEP-3063's kube-scheduler part, on the scheduler framework.

The decisions are the pure functions of :mod:`draflow.services.scheduler.plugins.classic.scheduling`; this
class puts them on the extension points and turns their claim updates into :class:`ClaimWrite` asks
(the shell appends them, see :mod:`.feed`):

* **PreFilter**: no KEP claims -> Skip. A missing claim, an Immediate claim not allocated yet, a
  claim in use up to its ``userLimit``, ... -> unschedulable (the pod waits until a classic claim
  of its own changes). A pending delayed claim that already has a ``selectedNode`` -> unschedulable
  "waiting for resource driver to allocate resource": the attempt stays stopped until the driver
  allocates or gives the node back.
* **Filter**: allocated claims need the node in ``availableOnNodes``; pending delayed claims drop
  the nodes in ``unsuitableNodes``.
* **PreScore** (``score_nodes``, weight 0: it only looks at the nodes that passed): publish them as
  ``potentialNodes`` of the pending delayed claims, unless the published list already holds them
  all (upstream's ``haveAllPotentialNodes``: the list shrinks as the driver marks nodes
  unsuitable, it is not rewritten every attempt).
* **Reserve**: pending delayed claims -> with one such claim, or once the driver answered every
  claim's current potential nodes (``answeredPotentialNodes``) and they hold the chosen node,
  write ``selectedNode``; otherwise wait for the driver's answer. Either way the attempt stops. All
  claims allocated -> the pod must be in every ``reservedFor``: if it is, success; if not, ask
  for the reservation (the shell applies it atomically against ``userLimit``) and stop: the next
  attempt, after the claim changed, binds.
* **Unreserve**: a later Reserve plugin failed after ours succeeded: leave ``reservedFor``.
* **PostFilter**: one allocated, delayed claim that rejected a node and has no other user ->
  phase Reallocate (the driver-controller frees it, the claim returns to Pending and is allocated
  again elsewhere); never while one of the pod's claims is already in Reallocate.

Every wait is a rejection, reported as Unschedulable with its reason (upstream's
dynamicresources plugin with classic DRA, Kubernetes 1.27-1.31): PreFilter waits as
Unschedulable, Reserve waits as Pending (``Code.PENDING``), which the framework ends as
Unschedulable on the chosen node ("0/1 nodes are available: 1 waiting for ..."). Either way the
pod waits in the unschedulable pool until one of its classic claims changes and none of them still
waits for the driver's answer to published potential nodes (the queueing hint), then goes to the
backoff queue, which an idle scheduler pops early: the wait ends on the driver's answer, not on a
timer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.classic_pod import pod_claims
from draflow.events.api.core_v1 import Pod
from draflow.services.dra.classic import claims as cl
from draflow.services.dra.classic.podclaims import pod_claim_refs
from draflow.services.dra.resourceclaim import pod_owner_reference
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from draflow.services.scheduler.framework.interface import CycleState, EventRegistration, PostFilterOutcome
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.framework.status import SKIP, QueueingHint, Status, pending, unschedulable
from draflow.services.scheduler.plugins.classic import scheduling as sch
from draflow.services.scheduler.plugins.classic.writes import (
    POTENTIAL,
    REALLOCATE,
    RESERVE,
    SELECT,
    UNRESERVE,
    ClaimWrite,
)

__all__ = ["NAME", "ClassicDynamicResources"]

NAME = "ClassicDynamicResources"
_STATE = NAME
_REJECTED = f"{NAME}/rejected"
_PUBLISHED = f"{NAME}/published"
_RESERVED = f"{NAME}/reserved"
_KEY_PREFIX = "classic:"

WAIT_ALLOCATION = "waiting for resource driver to allocate resource"
WAIT_INFORMATION = "waiting for resource driver to provide information"
WAIT_RESERVATION = "waiting for the pod to be added to reservedFor"


class ClassicDynamicResources:
    """See the module docstring. ``claims`` is fed by the scheduler's snapshot (``observe`` /
    ``forget``); asks go to ``sink`` (the shell) or pile up in ``outbox`` when none is set."""

    name = NAME
    weight = 0

    def __init__(self) -> None:
        self.claims: dict[str, dict[str, cv.ResourceClaim]] = {}
        self.sink: Callable[[ClaimWrite], None] | None = None
        self.outbox: list[ClaimWrite] = []
        # (namespace, claim name) -> True for claims another plugin allocates (numeric, KEP-4381)
        self.ignore: Callable[[str, str], bool] | None = None

    # -- the claims the snapshot feeds --------------------------------------------------------------
    def observe(self, claim: cv.ResourceClaim) -> None:
        self.claims.setdefault(claim.metadata.namespace, {})[claim.metadata.name] = claim

    def forget(self, namespace: str, name: str) -> None:
        self.claims.get(namespace, {}).pop(name, None)

    def _emit(self, write: ClaimWrite) -> None:
        if self.sink is not None:
            self.sink(write)
        else:
            self.outbox.append(write)

    def _ask(self, op: str, claim: cv.ResourceClaim, **kw: object) -> None:
        meta = claim.metadata
        self._emit(ClaimWrite(op=op, namespace=meta.namespace, name=meta.name, uid=meta.uid, **kw))  # type: ignore[arg-type]

    # -- queueing -----------------------------------------------------------------------------------
    def events_to_register(self) -> list[EventRegistration]:
        A = ActionType
        return [
            EventRegistration(
                EventResource.RESOURCE_CLAIM, A.ADD | A.UPDATE_OTHER, self._claim_hint, _claim_key
            ),
            EventRegistration(EventResource.NODE, A.ADD | A.UPDATE_NODE_LABEL),
        ]

    def queue_keys(self, pod: Pod) -> list[str]:
        """The classic claims a waiting pod refers to (only their changes can requeue it)."""
        ns = pod.metadata.namespace
        return [f"{_KEY_PREFIX}{ns}/{r.claim_name}" for r in pod_claim_refs(pod)]

    def _claim_hint(self, pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
        """A classic claim the pod uses was created or changed (the snapshot reports classic
        claims as ``ResourceClaim`` additions without an old object): Queue, unless one of the
        pod's claims still waits for its driver to answer the published ``potentialNodes`` (the
        scheduler's own write landing): that answer is the next change, and an attempt before it
        could only wait again (upstream's hint on PodSchedulingContext updates)."""
        claim = event.new
        ns = pod.metadata.namespace
        if not isinstance(claim, cv.ResourceClaim) or claim.metadata.namespace != ns:
            return QueueingHint.SKIP
        refs = pod_claim_refs(pod)
        if not any(r.claim_name == claim.metadata.name for r in refs):
            return QueueingHint.SKIP
        known = self.claims.get(ns, {})
        for ref in refs:
            c = known.get(ref.claim_name)
            if c is not None and _awaits_driver(c):
                return QueueingHint.SKIP
        return QueueingHint.QUEUE

    # -- extension points ---------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: Pod) -> Status | None:
        if pod_claims(pod) is None:
            return SKIP
        ns = pod.metadata.namespace
        ignore = self.ignore
        skip = None if ignore is None else (lambda name: ignore(ns, name))
        res = sch.pre_filter(pod, self.claims.get(ns, {}), skip)
        if res.code == sch.SKIP:
            return SKIP
        if res.code != sch.OK:
            return unschedulable(res.reason, plugin=NAME)
        for info in res.claims:
            claim = info.claim
            if (
                cl.phase(claim) == cv.PENDING
                and claim.spec.allocation_mode != cv.IMMEDIATE
                and cl.scheduling(claim).scheduler.selected_node
            ):
                return unschedulable(WAIT_ALLOCATION, plugin=NAME)
        state.data[_STATE] = res
        state.data[_REJECTED] = []
        return None

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
        res: sch.PreFilterResult | None = state.data.get(_STATE)
        if res is None:
            return None
        out = sch.filter_node(res, node.node)
        if out.ok:
            return None
        if out.rejected_by_allocated:
            state.data[_REJECTED].append(out)
        return unschedulable(*out.reasons, plugin=NAME)

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        return 0

    def score_nodes(self, state: CycleState, pod: Pod, nodes: list[NodeInfo]) -> dict[str, int]:
        """PreScore: publish the nodes that passed as potential nodes."""
        self._publish(state, [n.name for n in nodes])
        return {n.name: 0 for n in nodes}

    def normalize(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        return None

    def _publish(self, state: CycleState, names: list[str]) -> None:
        res: sch.PreFilterResult | None = state.data.get(_STATE)
        if res is None:
            return
        published: set[str] = state.data.setdefault(_PUBLISHED, set())
        nodes = tuple(sorted(names)[: sch.MAX_POTENTIAL_NODES])
        for info in res.claims:
            claim = info.claim
            if cl.phase(claim) != cv.PENDING or claim.spec.allocation_mode == cv.IMMEDIATE:
                continue
            have = set(cl.scheduling(claim).scheduler.potential_nodes)
            if not set(nodes) <= have:
                self._ask(POTENTIAL, claim, nodes=nodes)
                published.add(claim.metadata.name)

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        res: sch.PreFilterResult | None = state.data.get(_STATE)
        if res is None:
            return None
        if _PUBLISHED not in state.data:  # one feasible node: the framework did not score
            self._publish(state, [node_name])
        decided = sch.reserve(res, pod, node_name)
        if decided.code == sch.WAIT:
            waiting = [
                i.claim
                for i in res.claims
                if cl.phase(i.claim) == cv.PENDING and i.claim.spec.allocation_mode != cv.IMMEDIATE
            ]
            informed = all(
                cl.driver_answered(c) and node_name in cl.scheduling(c).scheduler.potential_nodes
                for c in waiting
            )
            if len(waiting) > 1 and not informed:
                return pending(WAIT_INFORMATION, plugin=NAME)
            for claim in decided.updates:
                self._ask(SELECT, claim, node=node_name)
            return pending(WAIT_ALLOCATION, plugin=NAME)
        if decided.code == sch.UNSCHEDULABLE:  # not allocated, being deleted, in use: a claim change helps
            return pending(decided.reason, plugin=NAME)
        if decided.updates:
            for claim in decided.updates:
                self._ask(RESERVE, claim, pod=pod_owner_reference(pod))
            return pending(WAIT_RESERVATION, plugin=NAME)
        state.data[_RESERVED] = True
        return None

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        res: sch.PreFilterResult | None = state.data.get(_STATE)
        if res is None or not state.data.pop(_RESERVED, False):
            return
        for claim in sch.unreserve([i.claim for i in res.claims], pod):
            self._ask(UNRESERVE, claim, pod=pod_owner_reference(pod))

    def post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> PostFilterOutcome:
        res: sch.PreFilterResult | None = state.data.get(_STATE)
        if res is None:
            return PostFilterOutcome(unschedulable(plugin=NAME))
        out = sch.post_filter(res, state.data.get(_REJECTED, []), pod.metadata.uid)
        if out.reallocate is None:
            return PostFilterOutcome(unschedulable(plugin=NAME))
        self._ask(REALLOCATE, out.reallocate, pod=pod_owner_reference(pod))
        name = out.reallocate.metadata.name
        message = f"deallocation of ResourceClaim {pod.metadata.namespace}/{name} requested (Reallocate)"
        return PostFilterOutcome(unschedulable(message, plugin=NAME))


def _claim_key(event: ClusterEvent) -> str | None:
    """Narrow a claim event to the pods naming it (structured claims: no pod of ours)."""
    claim = event.new
    if isinstance(claim, cv.ResourceClaim):
        return f"{_KEY_PREFIX}{claim.metadata.namespace}/{claim.metadata.name}"
    return _KEY_PREFIX


def _awaits_driver(claim: cv.ResourceClaim) -> bool:
    """A pending delayed claim with ``potentialNodes`` published and no node selected whose
    driver has not answered that list yet."""
    sched = cl.scheduling(claim)
    return (
        cl.phase(claim) == cv.PENDING
        and claim.spec.allocation_mode != cv.IMMEDIATE
        and not cl.is_deleting(claim)
        and not sched.scheduler.selected_node
        and bool(sched.scheduler.potential_nodes)
        and not cl.driver_answered(claim)
    )
