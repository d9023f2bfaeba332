"""The ``DynamicResources`` plugin: ResourceClaims with structured parameters.

Extension points (upstream ``pkg/scheduler/framework/plugins/dynamicresources``):

* PreEnqueue — every claim of the pod exists, is not being deleted, and template claims are
  controlled by the pod; otherwise the pod waits (gated) for a claim or pod event.
* PreFilter — resolves the claims; an allocated claim must be reservable (``reservedFor`` not
  full) unless already reserved for the pod; for claims to allocate: not in flight for another
  pod, every class exists. Pods without claims skip the plugin.
* Filter — allocated claims must be usable on the node (their allocation's node selector);
  claims to allocate must pass the device-index precheck (cheap), then the structured allocator
  (deferred: only on the node the framework would pick, and on every filtered node where a
  selector fails on some device: upstream runs the allocator on every node it filters, and a
  CEL runtime error on any of them aborts the attempt). Failures cached per node and claim
  spec until that node gets room back.
* PostFilter — picks, deterministically (pod claim order), an allocated claim that was not
  usable on some node and is reserved by nobody else, and asks for its deallocation.
* Score — see ``score.py`` (prioritized list, then bin-packing).
* Reserve — the allocations computed for the chosen node go into the assume cache.
* PreBind — what the saga writes per claim (``ClaimBinding``).
* StartSimulation / SimulateBindPod / SimulateEvictPod — KEP-4381's ``ClusterAutoScalerPlugin``
  for ``draflow simulate`` (``simulation.py``).

Extended resources backed by DRA (KEP-5004, ``draflow.services.dra.extended``): PreFilter finds
the pod's special claim from an earlier cycle or starts an in-memory one when some requested
extended resource is mapped to a DeviceClass; Filter splits the demand per node
(``decide_node``: resources the node advertises are NodeResourcesFit's, mapped ones it lacks go
into a node-specific copy of the special claim, over 32 devices is an error); the allocator
allocates that copy together with the pod's other claims (deferred filter); Reserve gives it a
deterministic generated name and uid and assumes its devices; PreBind hands it to the saga
(``extended_claim``: created, then allocated and reserved like any claim, then the pod's
``extendedResourceClaimStatus``). PostFilter asks for a special claim left over from an earlier
cycle to be deleted.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Mapping

import msgspec

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import AllocationResult, ResourceClaim, ResourceClaimConsumerReference
from draflow.events.dra import RequestDiagnosis
from draflow.services.dra.extended.claim import (
    MSG_STALE_CLAIM,
    NodeDecision,
    decide_node,
    is_in_memory,
    new_in_memory_claim,
    wants_dra,
)
from draflow.services.dra.resourceclaim import (
    RESERVED_FOR_MAX_SIZE,
    ClaimProblem,
    ClaimRef,
    is_reserved_for_pod,
    resolve_claims,
)
from draflow.services.dra.structured import (
    AllocationTimeout,
    Allocator,
    InvalidInputError,
    NodeAllocationError,
)
from draflow.services.dra.structured.nodeselector import CompiledNodeSelector, NodeSelectorParseError
from draflow.services.dra.structured.requests import check_claims
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.decisions import ClaimBinding, ExtendedClaim
from draflow.services.scheduler.framework.interface import CycleState, EventRegistration, PostFilterOutcome
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.framework.status import SKIP, Status, error, unresolvable, unschedulable
from draflow.services.scheduler.plugins.dynamicresources import simulation
from draflow.services.scheduler.plugins.dynamicresources.diagnosis import Negative, explain_nodes, refs
from draflow.services.scheduler.plugins.dynamicresources.events import queue_keys, registrations
from draflow.services.scheduler.plugins.dynamicresources.indexed import IndexedPrecheck, indexed_precheck
from draflow.services.scheduler.plugins.dynamicresources.precheck import (
    Estimate,
    Slot,
    compile_slots,
    precheck,
    selector_errors,
)
from draflow.services.scheduler.plugins.dynamicresources.score import normalize, raw_score
from draflow.services.scheduler.sagas.extended_steps import persisted_claim

__all__ = ["NAME", "DRAState", "DynamicResources"]

NAME = "DynamicResources"
CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
TIMED_OUT = "timed out trying to allocate devices"
_CANNOT_ALLOCATE = unschedulable(CANNOT_ALLOCATE, plugin=NAME)
_NOT_AVAILABLE = unschedulable(NOT_AVAILABLE, plugin=NAME)
_TIMED_OUT = unschedulable(TIMED_OUT, plugin=NAME)
_NEGATIVE_CACHE_MAX = 65536
_NO_ESTIMATE: Estimate = (0, 1 << 40)  # scores lowest


class DRAState:
    """Per-cycle data (upstream ``stateData``)."""

    __slots__ = (
        "allocator",
        "claims",
        "diagnoses",
        "estimates",
        "ext_allocation",
        "ext_nodes",
        "ext_plan",
        "extended",
        "fingerprint",
        "indexed",
        "invalid",
        "node_allocations",
        "selectors",
        "slots",
        "suspects",
        "to_allocate",
        "unavailable",
    )

    def __init__(self, claims: list[ResourceClaim]) -> None:
        self.claims = claims
        self.to_allocate: list[ResourceClaim] = [c for c in claims if c.status.allocation is None]
        self.selectors: list[tuple[int, CompiledNodeSelector]] = []
        self.slots: list[Slot] | None = None
        self.unavailable: set[int] = set()
        self.estimates: dict[str, Estimate] = {}
        # The precheck on the best-fit indexes (None: some signature has no exact index).
        self.indexed: IndexedPrecheck | None = None
        self.allocator: Allocator | None = None
        self.fingerprint: tuple[bytes, ...] | None = None
        self.node_allocations: dict[str, list[AllocationResult]] = {}
        # node -> the allocator's per-request diagnosis where it found no fit
        self.diagnoses: dict[str, list[RequestDiagnosis]] = {}
        # why the allocator would refuse the claims on any node (e.g. over 32 devices): Filter's
        # error; None until a node is turned away by the precheck (only then is it looked for)
        self.invalid: str | None = None
        # nodes that passed Filter where a selector fails on some device (see ``suspects``)
        self.suspects: list[NodeInfo] = []
        # KEP-5004: the special claim PreFilter found or made (None: no DRA extended resources),
        # its node-specific copies (Filter), and what Reserve decided for the chosen node
        self.extended: ResourceClaim | None = None
        self.ext_nodes: dict[str, NodeDecision] = {}
        self.ext_plan: tuple[str, ExtendedClaim] | None = None
        self.ext_allocation: AllocationResult | None = None

    def allocating(self, node_name: str) -> list[ResourceClaim]:
        """The claims the allocator must allocate on this node (the special claim's copy last)."""
        ext = self.ext_nodes.get(node_name)
        if ext is None or ext.claim is None:
            return self.to_allocate
        return [*self.to_allocate, ext.claim]


def _mentions_extended(pod: Pod) -> bool:
    """Cheap guard before counting the pod's extended resources: some domain-prefixed name."""
    for c in (*pod.spec.init_containers, *pod.spec.containers):
        res = c.resources
        if any("/" in n for n in res.limits) or any("/" in n for n in res.requests):
            return True
    return False


def _special_claim(pod: Pod, cluster: ClusterState) -> ResourceClaim | None:
    """PreFilter's special claim: the stored one from an earlier cycle, else a new in-memory one;
    None when the pod requests no extended resource a DeviceClass maps."""
    index = cluster.extended
    if not len(index) or not _mentions_extended(pod) or not wants_dra(pod, index):
        return None
    stored = cluster.special_claims_of(pod)
    return stored[0] if stored else new_in_memory_claim(pod)


class _Taken:
    """Claim names of a namespace the cluster knows (stored or assumed), for name generation."""

    __slots__ = ("cluster", "namespace")

    def __init__(self, cluster: ClusterState, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace

    def __contains__(self, name: object) -> bool:
        key = (self.namespace, str(name))
        return key in self.cluster.claims or key in self.cluster.assumed.claims


def _claim_uid(pod: Pod, name: str) -> str:
    """A deterministic uid for the special claim (replaying the decision gives the same one)."""
    digest = hashlib.sha256(f"{pod.metadata.uid}/{name}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


class DynamicResources:
    name = NAME
    weight = 1

    def __init__(self) -> None:
        # (node, claim specs) -> release stamp of the node when the allocator said no, and what it
        # said (the claims it was about and its diagnosis)
        self._negative: dict[tuple[str, tuple[bytes, ...]], Negative] = {}

    def events_to_register(self) -> list[EventRegistration]:
        return registrations()

    def queue_keys(self, pod: Pod) -> list[str]:
        """Claims the pod refers to: claim events are only checked against pods naming them."""
        return queue_keys(pod)

    # -- PreEnqueue / PreFilter ---------------------------------------------------------------
    def pre_enqueue(self, pod: Pod, cluster: ClusterState) -> Status | None:
        if not pod.spec.resource_claims:
            return None
        try:
            resolve_claims(pod, cluster)
        except ClaimProblem as exc:
            return unresolvable(str(exc), plugin=NAME)
        return None

    def pre_filter(self, state: CycleState, pod: Pod) -> Status | None:
        cluster = state.cluster
        extended = _special_claim(pod, cluster)
        if not pod.spec.resource_claims and extended is None:
            return SKIP
        try:
            claims = resolve_claims(pod, cluster)
        except ClaimProblem as exc:
            return unresolvable(str(exc), plugin=NAME)
        if not claims and extended is None:
            return SKIP
        data = DRAState(claims)
        data.extended = extended
        for index, claim in enumerate(claims):
            allocation = claim.status.allocation
            if allocation is not None:
                full = len(claim.status.reserved_for) >= RESERVED_FOR_MAX_SIZE
                if full and not is_reserved_for_pod(pod, claim):
                    return unresolvable("resourceclaim in use", plugin=NAME)
                if allocation.node_selector is not None:
                    selector = CompiledNodeSelector(allocation.node_selector)
                    if selector.error is not None:
                        return error(selector.error, plugin=NAME)
                    data.selectors.append((index, selector))
                continue
            meta = claim.metadata
            if cluster.pending_allocation(meta.namespace, meta.name) is not None:
                return unresolvable(
                    f"resource claim {meta.namespace}/{meta.name} is in the process of being allocated",
                    plugin=NAME,
                )
            status = _check_classes(claim, cluster.classes)
            if status is not None:
                return status
        if data.to_allocate:
            data.slots = compile_slots(data.to_allocate, cluster.classes)
            if data.slots:
                data.indexed = indexed_precheck(cluster, data.slots)
        state.data[NAME] = data
        return None

    # -- Filter -------------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
        data: DRAState = state.data[NAME]
        if data.extended is not None:
            d = decide_node(pod, data.extended, node.allocatable, state.cluster.extended)
            if d.status == "unschedulable":
                return unschedulable(d.reason, plugin=NAME)
            if d.status == "error":
                return error(d.reason, plugin=NAME)
            if d.status == "dra":
                data.ext_nodes[node.name] = d
        unavailable = False
        for index, selector in data.selectors:
            try:
                ok = selector.matches(node.name, node.labels)
            except NodeSelectorParseError as exc:
                return error(str(exc), plugin=NAME)
            if not ok:
                data.unavailable.add(index)
                unavailable = True
        if data.slots is not None:
            if data.indexed is not None:
                estimate = data.indexed.check(node.index)
            else:
                estimate = precheck(state.cluster.devices, node, data.slots)
            if estimate is None:
                return _no_fit(state, data)
            data.estimates[node.name] = estimate
            devices = state.cluster.devices
            if devices.any_errors and selector_errors(devices, node, data.slots):
                data.suspects.append(node)
        if unavailable:
            return _NOT_AVAILABLE
        return None

    def filter_batch(
        self, state: CycleState, pod: Pod, nodes: list[NodeInfo], rejected: list[tuple[NodeInfo, Status]]
    ) -> list[NodeInfo]:
        data: DRAState = state.data[NAME]
        if data.indexed is not None and not data.selectors and data.extended is None:
            before = len(rejected)
            kept = data.indexed.filter_nodes(nodes, rejected, _CANNOT_ALLOCATE, data.estimates)
            if len(rejected) > before:
                refused = _no_fit(state, data)
                if refused is not _CANNOT_ALLOCATE:
                    rejected[before:] = [(node, refused) for node, _ in rejected[before:]]
            return kept
        kept = []
        for node in nodes:
            status = self.filter(state, pod, node)
            if status is None:
                kept.append(node)
            else:
                rejected.append((node, status))
        return kept

    def wants_deferred(self, state: CycleState) -> bool:
        data: DRAState | None = state.data.get(NAME)
        return data is not None and (bool(data.to_allocate) or data.extended is not None)

    def suspects(self, state: CycleState) -> list[NodeInfo]:
        """Nodes that passed Filter on which the allocator may raise (a selector fails on one of
        their devices): the framework runs the deferred filter there too before it settles on a
        node, as upstream's Filter would have run the allocator on them."""
        data: DRAState | None = state.data.get(NAME)
        return [] if data is None else data.suspects

    def filter_deferred(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
        """The allocator on one node (the framework asks in score order)."""
        data: DRAState = state.data[NAME]
        cluster = state.cluster
        claims = data.allocating(node.name)
        if not claims:
            return None  # only extended resources, all from device plugins on this node
        if data.fingerprint is None:
            data.fingerprint = tuple(msgspec.json.encode(c.spec) for c in data.to_allocate)
        fingerprint = data.fingerprint
        if len(claims) > len(data.to_allocate):
            fingerprint = (*fingerprint, msgspec.json.encode(claims[-1].spec))
        key = (node.name, fingerprint)
        stamp = cluster.devices.release_stamp(node.name)
        cached = self._negative.get(key)
        if cached is not None and cached.stamp == stamp:
            data.diagnoses[node.name] = cached.lines_for(claims)
            return _CANNOT_ALLOCATE
        allocator = data.allocator
        if allocator is None:
            allocator = data.allocator = Allocator(
                cluster.slice_snapshot(),
                cluster.classes,
                cluster.allocated_state(),
                features=state.config.features,
            )
        try:
            results = allocator.allocate(
                node.node,
                claims,
                max_steps=state.config.allocator_max_steps,
                timeout=state.config.allocator_timeout_s,
            )
        except AllocationTimeout:
            return _TIMED_OUT
        except NodeAllocationError as exc:
            return unschedulable(str(exc), plugin=NAME)
        except InvalidInputError as exc:
            return error(str(exc), plugin=NAME)
        if results is None or len(results) != len(claims):
            if len(self._negative) >= _NEGATIVE_CACHE_MAX:
                self._negative.clear()
            lines = allocator.last_diagnosis
            data.diagnoses[node.name] = lines
            self._negative[key] = Negative(stamp, refs(claims), lines)
            return _CANNOT_ALLOCATE
        data.node_allocations[node.name] = results
        return None

    def request_diagnosis(
        self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]
    ) -> tuple[RequestDiagnosis, ...]:
        """Per request, why the nodes this plugin rejected with "cannot allocate all claims" had
        no room (``diagnosis.py``). Asked once per failed cycle."""
        data: DRAState | None = state.data.get(NAME)
        if data is None or not data.to_allocate:
            return ()
        rejected = [n for n, st in statuses.items() if st.plugin == NAME and st.reasons == (CANNOT_ALLOCATE,)]
        orders = data.indexed.orders if data.indexed is not None else None
        return explain_nodes(state.cluster, rejected, data.diagnoses, data.slots, orders)

    # -- ClusterAutoScalerPlugin (KEP-4381; see simulation.py) ------------------------------------
    def start_simulation(self, state: CycleState) -> Status | None:
        return simulation.start(state, NAME)

    def simulate_bind_pod(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
        return simulation.simulate_bind(self, state, pod, node)

    def simulate_evict_pod(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        return simulation.simulate_evict(state, pod)

    # -- PostFilter / Score ---------------------------------------------------------------------
    def post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> PostFilterOutcome:
        data: DRAState | None = state.data.get(NAME)
        outcome = self._post_filter(state, pod, data)
        if data is not None and data.extended is not None and not is_in_memory(data.extended):
            # upstream deletes a stored special claim here, so the next attempt starts anew
            ref = ClaimRef.of(data.extended)
            message = f"{MSG_STALE_CLAIM}: deletion of ResourceClaim {ref} requested"
            status = unschedulable(message, plugin=NAME)
            return PostFilterOutcome(status, outcome.deallocate, ref)
        return outcome

    def _post_filter(self, state: CycleState, pod: Pod, data: DRAState | None) -> PostFilterOutcome:
        if data is None or not data.claims:
            return PostFilterOutcome(unschedulable("no new claims to deallocate", plugin=NAME))
        uid = pod.metadata.uid
        for index in sorted(data.unavailable):
            claim = data.claims[index]
            reserved = claim.status.reserved_for
            if not reserved or (len(reserved) == 1 and reserved[0].uid == uid):
                ref = ClaimRef.of(claim)
                return PostFilterOutcome(
                    unschedulable(f"deallocation of ResourceClaim {ref} requested", plugin=NAME), ref
                )
        return PostFilterOutcome(unschedulable("still not schedulable", plugin=NAME))

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        data: DRAState = state.data[NAME]
        return raw_score(data.estimates.get(node.name, _NO_ESTIMATE))

    def score_nodes(self, state: CycleState, pod: Pod, nodes: list[NodeInfo]) -> dict[str, int]:
        """``score`` for many nodes at once (the framework prefers this when present)."""
        estimates = state.data[NAME].estimates
        return {node.name: raw_score(estimates.get(node.name, _NO_ESTIMATE)) for node in nodes}

    def normalize(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        normalize(scores)

    def node_order(
        self, state: CycleState, pod: Pod, nodes: list[NodeInfo], start: int
    ) -> Iterator[NodeInfo] | None:
        """Nodes best-first when one count decides the score (see ``indexed.py``): the framework
        then stops at the first node passing every filter. None: it samples and scores."""
        data: DRAState = state.data[NAME]
        return None if data.indexed is None else data.indexed.walk(start)

    # -- Reserve / PreBind ----------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status | None:
        data: DRAState | None = state.data.get(NAME)
        if data is None:
            return None
        claims = data.allocating(node_name)
        if not claims:
            return None
        results = data.node_allocations.get(node_name)
        if results is None or len(results) != len(claims):
            return error("claim allocation not found for node", plugin=NAME)
        n = len(data.to_allocate)
        pairs = list(zip(data.to_allocate, results[:n], strict=True))
        ext = data.ext_nodes.get(node_name)
        if ext is not None and ext.claim is not None:
            claim = self.simulated_special_claim(state, pod, ext.claim)
            data.ext_plan = (node_name, ExtendedClaim(claim=claim, mappings=ext.mappings))
            data.ext_allocation = results[n]
            pairs.append((claim, results[n]))
        state.cluster.assume_allocations(pod, node_name, pairs)
        return None

    def simulated_special_claim(
        self, state: CycleState, pod: Pod, node_claim: ResourceClaim
    ) -> ResourceClaim:
        """KEP-5004: the special claim as PreBind creates it (generated name, deterministic uid)."""
        claim = persisted_claim(node_claim, _Taken(state.cluster, pod.metadata.namespace))
        meta = msgspec.structs.replace(claim.metadata, uid=_claim_uid(pod, claim.metadata.name))
        return msgspec.structs.replace(claim, metadata=meta)

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """Nothing beyond the framework's ``ClusterState.forget`` (pending allocations go there)."""

    def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> list[ClaimBinding]:
        data: DRAState | None = state.data.get(NAME)
        if data is None:
            return []
        results = dict(zip(map(id, data.to_allocate), data.node_allocations.get(node_name, ()), strict=False))
        meta = pod.metadata
        consumer = ResourceClaimConsumerReference(resource="pods", name=meta.name, uid=meta.uid)
        out: list[ClaimBinding] = []
        for claim in data.claims:
            # a claim already reserved for the pod is listed too (nothing to write): the saga
            # checks who reserved it, since another instance's attempt for this pod may have
            out.append(ClaimBinding(ClaimRef.of(claim), results.get(id(claim)), consumer))
        plan = self.extended_claim(state, pod, node_name)
        if plan is not None:
            out.append(ClaimBinding(ClaimRef.of(plan.claim), data.ext_allocation, consumer))
        return out

    def extended_claim(self, state: CycleState, pod: Pod, node_name: str) -> ExtendedClaim | None:
        """KEP-5004: the special claim Reserve decided for ``node_name`` (PreBind creates it)."""
        data: DRAState | None = state.data.get(NAME)
        if data is None or data.ext_plan is None or data.ext_plan[0] != node_name:
            return None
        return data.ext_plan[1]


def _no_fit(state: CycleState, data: DRAState) -> Status:
    """The precheck turned a node away: "cannot allocate all claims", unless the allocator would
    refuse these claims on any node (the checks that need no node: over 32 devices, disabled
    features...). Upstream's allocator raises that on every node its Filter asks about, an error
    that aborts the attempt; the precheck must not turn it into "no fit". Looked for once per
    cycle, and only here: on a node that passes the precheck the allocator raises it itself."""
    if data.invalid is None:
        try:
            check_claims(data.to_allocate, state.cluster.classes.get, state.config.features)
        except InvalidInputError as exc:
            data.invalid = str(exc)
        else:
            data.invalid = ""
    return error(data.invalid, plugin=NAME) if data.invalid else _CANNOT_ALLOCATE


def _check_classes(claim: ResourceClaim, classes: Mapping[str, object]) -> Status | None:
    """Every request's class exists (missing: wait for a class event)."""
    ref = f"{claim.metadata.namespace}/{claim.metadata.name}"
    for req in claim.spec.devices.requests:
        if req.exactly is not None:
            pairs = [(req.name, req.exactly.device_class_name)]
        elif req.first_available:
            pairs = [(f"{req.name}/{sub.name}", sub.device_class_name) for sub in req.first_available]
        else:
            return unresolvable(
                f"resource claim {ref}, request {req.name}: unknown request type", plugin=NAME
            )
        for name, class_name in pairs:
            if not class_name:
                return error(f"request {name}: unsupported request type", plugin=NAME)
            if class_name not in classes:
                return unresolvable(f"request {name}: device class {class_name} does not exist", plugin=NAME)
    return None
