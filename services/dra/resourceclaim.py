"""How a pod refers to its claims: one answer for the apiserver, scheduler, kubelet and controllers.

After ``k8s.io/dynamic-resource-allocation/resourceclaim`` (``Name``, ``IsForPod``,
``IsReservedForPod``), ``metav1.IsControlledBy`` and the claim controller's ``isPodDone`` /
``owningPod`` / claim name prefix: one place decides which claim a ``pod.spec.resourceClaims``
entry means, whether a claim is the pod's own and reserved for it, and how a generated claim is
named and owned, so the services cannot disagree about it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import msgspec

from events.api.core_v1 import Pod, PodResourceClaim
from events.api.meta import ObjectMeta, OwnerReference
from events.api.resource_v1 import ResourceClaim, ResourceClaimConsumerReference
from events.dra import DELETE_PROTECTION_FINALIZER  # the facts' finalizer (ClaimAllocated adds it)

__all__ = [
    "DELETE_PROTECTION_FINALIZER",
    "MAX_CLAIM_PREFIX_LEN",
    "POD_CLAIM_NAME_ANNOTATION",
    "RESERVED_FOR_MAX_SIZE",
    "ClaimLookup",
    "ClaimName",
    "ClaimNameError",
    "ClaimProblem",
    "ClaimRef",
    "controller_ref",
    "generate_claim_name_prefix",
    "is_controlled_by",
    "is_for_pod",
    "is_pod_done",
    "is_pod_terminal",
    "is_reserved_for_pod",
    "owning_pod",
    "pod_claim_names",
    "pod_consumer_ref",
    "pod_owner_reference",
    "resolve_claim_name",
    "resolve_claims",
]

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
RESERVED_FOR_MAX_SIZE = 256  # ResourceClaimReservedForMaxSize
# The claim controller leaves room for a hyphen and the 5 random characters of generateName.
MAX_CLAIM_PREFIX_LEN = 57


class ClaimRef(msgspec.Struct, frozen=True, kw_only=True):
    """A claim by namespace, name and uid (the kubelet plugin API's ``Claim``, a PreBind target)."""

    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, claim: ResourceClaim) -> ClaimRef:
        meta = claim.metadata
        return cls(namespace=meta.namespace, name=meta.name, uid=meta.uid)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


# -- which claim an entry of pod.spec.resourceClaims means -------------------------------------------


class ClaimNameError(ValueError):
    """The pod's claim cannot be named yet (template claim not created) or the entry is malformed."""

    def __init__(self, message: str, *, not_created: bool = False) -> None:
        super().__init__(message)
        self.not_created = not_created


@dataclass(frozen=True, slots=True)
class ClaimName:
    """``name`` None: the template's claim was judged unnecessary (nothing to do for this entry).

    ``must_check_owner``: the claim was generated for the pod, so it must be controlled by it.
    """

    name: str | None
    must_check_owner: bool


def resolve_claim_name(pod: Pod, pod_claim: PodResourceClaim) -> ClaimName:
    """Which claim a ``pod.spec.resourceClaims`` entry refers to (upstream ``resourceclaim.Name``)."""
    if pod_claim.resource_claim_name is not None:
        return ClaimName(pod_claim.resource_claim_name, False)
    meta = pod.metadata
    if pod_claim.resource_claim_template_name is not None:
        for status in pod.status.resource_claim_statuses:
            if status.name == pod_claim.name:
                return ClaimName(status.resource_claim_name, True)
        raise ClaimNameError(
            f'pod "{meta.namespace}/{meta.name}": ResourceClaim not created yet', not_created=True
        )
    raise ClaimNameError(
        f'pod "{meta.namespace}/{meta.name}", spec.resourceClaim "{pod_claim.name}": '
        "none of the supported fields are set"
    )


def pod_claim_names(pod: Pod) -> list[tuple[str, bool]]:
    """``(claim name, must check owner)`` for every claim the pod uses, unneeded ones skipped: the
    ``spec.resourceClaims`` in order, then the special claim for extended resources (KEP-5004,
    ``status.extendedResourceClaimStatus``). Raises ``ClaimNameError`` (a template claim not
    created yet, or a malformed entry)."""
    names: list[tuple[str, bool]] = []
    for pod_claim in pod.spec.resource_claims:
        resolved = resolve_claim_name(pod, pod_claim)
        if resolved.name is not None:
            names.append((resolved.name, resolved.must_check_owner))
    extended = pod.status.extended_resource_claim_status
    if extended is not None and extended.resource_claim_name:
        names.append((extended.resource_claim_name, False))
    return names


class ClaimProblem(Exception):
    """A pod's claims are not ready; ``str()`` is the reason (what the scheduler reports)."""


class ClaimLookup(Protocol):
    """Where :func:`resolve_claims` finds claims (the scheduler's cluster snapshot, say)."""

    def claim(self, namespace: str, name: str) -> ResourceClaim | None: ...


def _spec_claim_names(pod: Pod) -> Iterator[tuple[str, bool]]:
    for entry in pod.spec.resource_claims:
        try:
            resolved = resolve_claim_name(pod, entry)
        except ClaimNameError as err:
            raise ClaimProblem(str(err)) from None
        if resolved.name:
            yield resolved.name, resolved.must_check_owner


def resolve_claims(pod: Pod, claims: ClaimLookup) -> list[ResourceClaim]:
    """The pod's claims in ``spec.resourceClaims`` order, as kube-scheduler's DRA plugin gets them:
    each must exist, not be being deleted, and (generated from a template) be the pod's own.
    Raises :class:`ClaimProblem` with the reason PreEnqueue and PreFilter report."""
    namespace = pod.metadata.namespace
    out: list[ResourceClaim] = []
    for name, must_check_owner in _spec_claim_names(pod):
        claim = claims.claim(namespace, name)
        if claim is None:
            raise ClaimProblem(f'could not find ResourceClaim "{namespace}/{name}"')
        if claim.metadata.deletion_timestamp:
            raise ClaimProblem(f'resourceclaim "{name}" is being deleted')
        if must_check_owner:
            problem = is_for_pod(pod, claim)
            if problem is not None:
                raise ClaimProblem(problem)
        out.append(claim)
    return out


# -- ownership and reservation ---------------------------------------------------------------------


def controller_ref(meta: ObjectMeta) -> OwnerReference | None:
    """The owner reference marked ``controller: true`` (at most one is allowed; the first counts)."""
    for ref in meta.owner_references:
        if ref.controller:
            return ref
    return None


def is_controlled_by(meta: ObjectMeta, owner_uid: str) -> bool:
    """Upstream ``metav1.IsControlledBy``: the controller reference names this owner (by uid)."""
    ref = controller_ref(meta)
    return ref is not None and ref.uid == owner_uid


def is_for_pod(pod: Pod, claim: ResourceClaim) -> str | None:
    """None when the claim is controlled by the pod (upstream ``IsForPod``), else its one-line reason."""
    c, p = claim.metadata, pod.metadata
    if c.namespace == p.namespace and is_controlled_by(c, p.uid):
        return None
    return (
        f"ResourceClaim {c.namespace}/{c.name} was not created for pod {p.namespace}/{p.name} "
        "(pod is not owner)"
    )


def is_reserved_for_pod(pod: Pod, claim: ResourceClaim) -> bool:
    """Upstream ``IsReservedForPod``: a ``reservedFor`` entry has the pod's uid (any resource)."""
    uid = pod.metadata.uid
    return any(ref.uid == uid for ref in claim.status.reserved_for)


def pod_consumer_ref(pod: Pod) -> ResourceClaimConsumerReference:
    """The ``status.reservedFor`` entry for a pod (core group, resource ``pods``)."""
    return ResourceClaimConsumerReference(resource="pods", name=pod.metadata.name, uid=pod.metadata.uid)


def pod_owner_reference(pod: Pod) -> OwnerReference:
    """The owner reference a generated claim carries: the pod, as controller, blocking deletion."""
    return OwnerReference(
        api_version="v1",
        kind="Pod",
        name=pod.metadata.name,
        uid=pod.metadata.uid,
        controller=True,
        block_owner_deletion=True,
    )


def owning_pod(claim: ResourceClaim) -> OwnerReference | None:
    """The controlling pod of a generated claim (apiVersion v1, kind Pod), if any."""
    ref = controller_ref(claim.metadata)
    if ref is not None and ref.api_version == "v1" and ref.kind == "Pod":
        return ref
    return None


# -- pods that are done ----------------------------------------------------------------------------


def is_pod_terminal(pod: Pod) -> bool:
    """Upstream ``podutil.IsPodTerminal``: phase Succeeded or Failed (it never runs again)."""
    return pod.status.phase in ("Succeeded", "Failed")


def is_pod_done(pod: Pod) -> bool:
    """Certain never to run (again): terminal phase, or deleted before it was scheduled."""
    return is_pod_terminal(pod) or (pod.metadata.deletion_timestamp is not None and not pod.spec.node_name)


# -- naming ------------------------------------------------------------------------------------------


def generate_claim_name_prefix(pod_name: str, pod_claim_name: str) -> str:
    """The ``generateName`` of a claim made from a template for ``pod.spec.resourceClaims[].name``.

    The resource claim controller's prefix (``pkg/controller/resourceclaim``): ``<pod>-<claim>-``;
    when that exceeds 57 characters both parts shrink in proportion to their length, so a long pod
    name cannot push the claim name out entirely, and (upstream quirk, kept) the cut prefix has
    *no* trailing hyphen.
    """
    prefix = f"{pod_name}-{pod_claim_name}-"
    if len(prefix) <= MAX_CLAIM_PREFIX_LEN:
        return prefix
    total = len(prefix)
    pod_part = pod_name[: len(pod_name) * MAX_CLAIM_PREFIX_LEN // total]
    claim_part = pod_claim_name[: len(pod_claim_name) * MAX_CLAIM_PREFIX_LEN // total]
    return f"{pod_part}-{claim_part}"
