"""The resource claim controller's two level-triggered deciders: ``sync_pod`` and ``sync_claim``.

Behaviour after upstream ``pkg/controller/resourceclaim/controller.go`` (see
``docs/controllers.md`` for the reading and the deviations). Each call looks only at the objects it
is given (the shell reads them from its projection before every sync) and returns the actions that
move them toward the desired state; a second call on the result returns nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from typing import Any

import msgspec

from draflow.events.api.core_v1 import Pod, PodResourceClaim, PodResourceClaimStatus
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.resource_v1 import ResourceClaim, ResourceClaimTemplate
from draflow.services.dra.claimactions import (
    AddReservedFor,
    ClaimAction,
    CreateClaim,
    Deallocate,
    DeleteClaim,
    RecordEvent,
    RecordPodClaimStatus,
    RemoveFinalizer,
    release_reservations,
)
from draflow.services.dra.resourceclaim import (
    DELETE_PROTECTION_FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
    ClaimNameError,
    generate_claim_name_prefix,
    is_for_pod,
    is_pod_done,
    is_pod_terminal,
    is_reserved_for_pod,
    named_claims,
    owning_pod,
    pod_consumer_ref,
    pod_owner_reference,
    resolve_claim_name,
)
from draflow.services.runtime.naming import SuffixSource, hash_suffix, unique_generated_name

__all__ = [
    "FAILED_CLAIM_CREATION",
    "find_pod_resource_claim",
    "sync_claim",
    "sync_pod",
    "sync_pod_from",
]

FAILED_CLAIM_CREATION = "FailedResourceClaimCreation"


def _by_name(objs: Iterable[ResourceClaim] | Iterable[ResourceClaimTemplate], namespace: str) -> dict:
    return {o.metadata.name: o for o in objs if o.metadata.namespace == namespace}


def find_pod_resource_claim(
    pod: Pod, pod_claim: PodResourceClaim, claims: Iterable[ResourceClaim]
) -> ResourceClaim | None:
    """A claim already generated for this pod claim: controlled by the pod, annotated with its name.

    This is the crash-recovery rule: a claim created just before the controller died (before the
    pod status recorded it) is adopted instead of creating a second one. Deterministic pick: the
    first by name (upstream takes the first the cache returns; there should only be one).
    """
    for claim in sorted(claims, key=lambda c: c.metadata.name):
        owner = owning_pod(claim)
        if owner is None or owner.uid != pod.metadata.uid:
            continue
        if claim.metadata.namespace != pod.metadata.namespace:
            continue
        if claim.metadata.annotations.get(POD_CLAIM_NAME_ANNOTATION) == pod_claim.name:
            return claim
    return None


class _Taken:
    """Claim names in use: those given, those decided in this call, and the caller's ``taken``."""

    def __init__(self, names: set[str], outside: Container[str] | None) -> None:
        self.names = names
        self.outside = outside

    def __contains__(self, name: object) -> bool:
        return name in self.names or (self.outside is not None and name in self.outside)

    def add(self, name: str) -> None:
        self.names.add(name)


class _PodSync:
    """State of one ``sync_pod`` call: the namespace's claims plus the names decided so far."""

    def __init__(
        self,
        pod: Pod,
        claims: Mapping[str, ResourceClaim],
        templates: Mapping[str, ResourceClaimTemplate],
        suffixes: SuffixSource,
        taken: Container[str] | None = None,
    ) -> None:
        self.pod = pod
        self.claims = claims
        self.templates = templates
        self.suffixes = suffixes
        self.taken = _Taken(set(claims), taken)
        self.actions: list[ClaimAction] = []
        self.new_names: dict[str, str] = {}

    def warn(self, pod_claim: PodResourceClaim, message: str) -> None:
        meta = self.pod.metadata
        self.actions.append(
            RecordEvent(
                namespace=meta.namespace,
                kind="Pod",
                name=meta.name,
                uid=meta.uid,
                type="Warning",
                reason=FAILED_CLAIM_CREATION,
                message=f"PodResourceClaim {pod_claim.name}: {message}",
            )
        )

    def handle(self, pod_claim: PodResourceClaim) -> None:
        """Make sure the claim for one pod claim exists and is recorded (upstream ``handleClaim``)."""
        pod = self.pod
        try:
            resolved = resolve_claim_name(pod, pod_claim)
        except ClaimNameError as err:
            if not err.not_created:
                self.warn(pod_claim, f"checking for claim before creating it: {err}")
                return
        else:
            if resolved.name is None:
                return  # judged unnecessary earlier
            claim = self.claims.get(resolved.name)
            if claim is not None and (not resolved.must_check_owner or is_for_pod(pod, claim) is None):
                return  # already created
            # Recorded but gone (deleted by accident) or no longer ours: make a new one.
        template_name = pod_claim.resource_claim_template_name
        if template_name is None:
            return  # a user claim: the user creates it
        existing = find_pod_resource_claim(pod, pod_claim, self.claims.values())
        if existing is not None:
            self.new_names[pod_claim.name] = existing.metadata.name
            return
        template = self.templates.get(template_name)
        if template is None:
            self.warn(
                pod_claim,
                f'resource claim template "{template_name}": '
                f'resourceclaimtemplate.resource.k8s.io "{template_name}" not found',
            )
            return
        meta = pod.metadata
        prefix = generate_claim_name_prefix(meta.name, pod_claim.name)
        key = f"{meta.namespace}/{meta.uid}/{pod_claim.name}"
        name = unique_generated_name(prefix, key, self.taken, self.suffixes)
        self.taken.add(name)
        annotations = dict(template.spec.metadata.annotations)
        annotations[POD_CLAIM_NAME_ANNOTATION] = pod_claim.name
        self.actions.append(
            CreateClaim(
                claim=ResourceClaim(
                    metadata=ObjectMeta(
                        name=name,
                        generate_name=prefix,
                        namespace=meta.namespace,
                        labels=dict(template.spec.metadata.labels),
                        annotations=annotations,
                        owner_references=(pod_owner_reference(pod),),
                    ),
                    spec=template.spec.spec,
                ),
                pod_claim_name=pod_claim.name,
                template_name=template_name,
            )
        )
        self.new_names[pod_claim.name] = name

    def merged_statuses(self) -> tuple[PodResourceClaimStatus, ...]:
        """Existing entries updated in place, new ones appended (server-side apply, key ``name``)."""
        merged = list(self.pod.status.resource_claim_statuses)
        index = {status.name: i for i, status in enumerate(merged)}
        for pod_claim_name, claim_name in self.new_names.items():
            entry = PodResourceClaimStatus(name=pod_claim_name, resource_claim_name=claim_name)
            if pod_claim_name in index:
                merged[index[pod_claim_name]] = entry
            else:
                merged.append(entry)
        return tuple(merged)


Lookup = Callable[[str, str, str], Any]  # (kind, namespace, name) -> the object or None


def sync_pod_from(pod: Pod, get: Lookup, owned: Iterable[str], taken: Container[str]) -> list[ClaimAction]:
    """``sync_pod`` on exactly what it reads, looked up by key: the claims the pod names or owns
    (``owned``: the names of the claims it controls) and the templates it uses. The service calls
    it on its cache; ``draflow verify-replay`` on the log folded to the decision's position."""
    ns = pod.metadata.namespace
    claims = [
        c
        for c in (get("ResourceClaim", ns, n) for n in sorted(named_claims(pod) | set(owned)))
        if isinstance(c, ResourceClaim)
    ]
    template_names = {c.resource_claim_template_name or "" for c in pod.spec.resource_claims} - {""}
    templates = [
        t
        for t in (get("ResourceClaimTemplate", ns, n) for n in sorted(template_names))
        if isinstance(t, ResourceClaimTemplate)
    ]
    return sync_pod(pod, claims, templates, taken=taken)


def sync_pod(
    pod: Pod,
    claims: Iterable[ResourceClaim],
    templates: Iterable[ResourceClaimTemplate],
    *,
    suffixes: SuffixSource = hash_suffix,
    taken: Container[str] | None = None,
) -> list[ClaimAction]:
    """Actions for one pod: generate missing claims, record them, reserve claims of a bound pod.

    ``claims`` / ``templates``: those of the pod's namespace (others are ignored); it is enough to
    give the claims the pod names (spec and status) and those it owns, when ``taken`` answers
    whether a claim name is in use in the namespace (a generated name avoids those). Pods being
    deleted are left alone; terminal pods get no new claims (they would be deleted right away).
    A pod claim that fails (missing template) gets a Warning event and does not stop the others.
    """
    if pod.metadata.deletion_timestamp is not None or not pod.spec.resource_claims:
        return []
    namespace = pod.metadata.namespace
    state = _PodSync(pod, _by_name(claims, namespace), _by_name(templates, namespace), suffixes, taken)
    if not is_pod_terminal(pod):
        for pod_claim in pod.spec.resource_claims:
            state.handle(pod_claim)
    actions = state.actions
    statuses = state.merged_statuses()
    if statuses != pod.status.resource_claim_statuses:
        actions.append(
            RecordPodClaimStatus(
                namespace=namespace, pod_name=pod.metadata.name, pod_uid=pod.metadata.uid, statuses=statuses
            )
        )
    if pod.spec.node_name:
        actions.extend(_reserve_for_bound_pod(pod, statuses, state.claims))
    return actions


def _reserve_for_bound_pod(
    pod: Pod, statuses: tuple[PodResourceClaimStatus, ...], claims: Mapping[str, ResourceClaim]
) -> list[ClaimAction]:
    """A pod bound without the scheduler's reservation (e.g. ``nodeName`` set by hand) gets one.

    Like upstream, the first claim that cannot be resolved (not created yet, missing, not owned)
    ends the pass: the pod will not start before that is fixed anyway.
    """
    view = msgspec.structs.replace(
        pod, status=msgspec.structs.replace(pod.status, resource_claim_statuses=statuses)
    )
    actions: list[ClaimAction] = []
    for pod_claim in pod.spec.resource_claims:
        try:
            resolved = resolve_claim_name(view, pod_claim)
        except ClaimNameError:
            break
        if resolved.name is None:
            continue
        claim = claims.get(resolved.name)
        if claim is None or (resolved.must_check_owner and is_for_pod(view, claim) is not None):
            break
        if claim.status.allocation is not None and not is_reserved_for_pod(pod, claim):
            actions.append(
                AddReservedFor(
                    namespace=claim.metadata.namespace,
                    claim_name=claim.metadata.name,
                    claim_uid=claim.metadata.uid,
                    consumer=pod_consumer_ref(pod),
                )
            )
    return actions


def sync_claim(claim: ResourceClaim, pods: Iterable[Pod]) -> list[ClaimAction]:
    """Actions for one claim: drop stale reservations, deallocate and unfinalize, delete if orphaned.

    ``pods``: the pods of the claim's namespace as the projection knows them. The projection is
    built from the one ordered log, so a pod it does not hold is gone (upstream double-checks
    with the API server because its informer may lag; ours has no second source to ask).
    """
    meta = claim.metadata
    pods_by_name = {p.metadata.name: p for p in pods if p.metadata.namespace == meta.namespace}
    valid = []
    removed: list[str] = []
    for ref in claim.status.reserved_for:
        if ref.api_group == "" and ref.resource == "pods":
            pod = pods_by_name.get(ref.name)
            if pod is None or pod.metadata.uid != ref.uid or is_pod_done(pod):
                removed.append(ref.uid)
                continue
        # Other consumer kinds are kept untouched (upstream refuses to sync such a claim).
        valid.append(ref)

    ns, name, uid = meta.namespace, meta.name, meta.uid
    protected = DELETE_PROTECTION_FINALIZER in meta.finalizers
    actions: list[ClaimAction] = release_reservations(claim, removed)
    if not removed and protected and meta.deletion_timestamp is not None and not valid:
        # Deleted while unused (e.g. allocated, then never used): let the deletion finish.
        if claim.status.allocation is not None:
            actions.append(Deallocate(namespace=ns, claim_name=name, claim_uid=uid))
        actions.append(
            RemoveFinalizer(
                namespace=ns, claim_name=name, claim_uid=uid, finalizer=DELETE_PROTECTION_FINALIZER
            )
        )

    if not valid and meta.deletion_timestamp is None:
        owner = owning_pod(claim)
        if owner is not None:
            pod = pods_by_name.get(owner.name)
            reason = ""
            if pod is None:
                reason = f"owning pod {meta.namespace}/{owner.name} is gone"
            elif pod.metadata.uid != owner.uid:
                reason = f"owning pod {meta.namespace}/{owner.name} was replaced"
            elif is_pod_done(pod):
                reason = f"owning pod {meta.namespace}/{owner.name} is done"
            if reason:
                actions.append(DeleteClaim(namespace=ns, claim_name=name, claim_uid=uid, reason=reason))
    return actions
