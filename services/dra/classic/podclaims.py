"""Which classic claims a Pod uses, and the claims its inline templates stand for.

A KEP-shaped Pod (see :mod:`events.api.classic_pod`) names each claim either directly
(``resourceClaimName``) or through an inline template, whose claim is ``<pod>-<entry>`` and must
be controlled by the Pod (``metav1.IsControlledBy``, as upstream's ``IsForPod``): a same-named
claim that the Pod does not control is never used (KEP), the Pod waits until it is removed.
:func:`sync_pod` is the classic claim controller's decider: create the missing template claims,
report foreign ones, delete the Pod's claims once the Pod is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeAlias

import msgspec

from events.api import classic_v1alpha1 as cv
from events.api import core_v1 as c1
from events.api.classic_pod import pod_claims
from events.api.meta import ObjectMeta
from services.dra.claimactions import CreateClaim, DeleteClaim
from services.dra.resourceclaim import is_controlled_by, pod_owner_reference

__all__ = [
    "Blocked",
    "PodAction",
    "PodClaimRef",
    "claim_from_template",
    "generated_claim_name",
    "pod_claim_refs",
    "pods_waiting_for",
    "sync_pod",
]


class PodClaimRef(msgspec.Struct, frozen=True, kw_only=True):
    pod_claim_name: str
    claim_name: str
    from_template: bool


def pod_claim_refs(pod: c1.Pod) -> tuple[PodClaimRef, ...]:
    """The Pod's classic claims (empty for a Pod without the KEP annotation)."""
    claims = pod_claims(pod)
    if claims is None:
        return ()
    out = []
    for entry in claims.resource_claims:
        if entry.resource_claim_name is not None:
            out.append(
                PodClaimRef(
                    pod_claim_name=entry.name, claim_name=entry.resource_claim_name, from_template=False
                )
            )
        else:
            name = generated_claim_name(pod.metadata.name, entry.name)
            out.append(PodClaimRef(pod_claim_name=entry.name, claim_name=name, from_template=True))
    return tuple(out)


def generated_claim_name(pod_name: str, entry_name: str) -> str:
    """KEP: the claim made from an inline template is called ``<pod name>-<resource name>``."""
    return f"{pod_name}-{entry_name}"


def claim_from_template(pod: c1.Pod, entry: cv.PodResourceClaim) -> cv.ResourceClaim:
    """The claim the classic claim controller creates for an inline template (owned by the Pod)."""
    if entry.template is None:
        raise ValueError(f"pod claim {entry.name!r} has no template")
    tmeta = entry.template.metadata or ObjectMeta()
    meta = ObjectMeta(
        name=generated_claim_name(pod.metadata.name, entry.name),
        namespace=pod.metadata.namespace,
        labels=dict(tmeta.labels),
        annotations=dict(tmeta.annotations),
        owner_references=(pod_owner_reference(pod),),
    )
    return cv.ResourceClaim(metadata=meta, spec=cv.template_spec(entry.template))


class Blocked(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """Reported as a Warning event on the Pod; nothing is written."""

    reason: str


PodAction: TypeAlias = CreateClaim[cv.ResourceClaim] | DeleteClaim | Blocked


def sync_pod(
    pod: c1.Pod, existing: Mapping[str, cv.ResourceClaim], *, pod_gone: bool = False
) -> list[PodAction]:
    """Actions for the Pod's template claims. ``existing``: classic claims of the namespace by name."""
    actions: list[PodAction] = []
    claims = pod_claims(pod)
    if claims is None:
        return actions
    for entry in claims.resource_claims:
        if entry.template is None:
            continue
        name = generated_claim_name(pod.metadata.name, entry.name)
        have = existing.get(name)
        if pod_gone:
            if (
                have is not None
                and is_controlled_by(have.metadata, pod.metadata.uid)
                and have.metadata.deletion_timestamp is None
            ):
                actions.append(
                    DeleteClaim(
                        namespace=pod.metadata.namespace,
                        claim_name=name,
                        claim_uid=have.metadata.uid,
                        reason=f"owning pod {pod.metadata.namespace}/{pod.metadata.name} is gone",
                    )
                )
            continue
        if have is None:
            actions.append(CreateClaim(claim=claim_from_template(pod, entry), pod_claim_name=entry.name))
        elif not is_controlled_by(have.metadata, pod.metadata.uid):
            actions.append(
                Blocked(reason=f"ResourceClaim {name} exists but was not created for pod {pod.metadata.name}")
            )
    return actions


def pods_waiting_for(claim: cv.ResourceClaim, pods: Iterable[c1.Pod]) -> list[c1.Pod]:
    """Unscheduled pods that use ``claim`` (its owner first, then by name): whose claims the
    driver should consider together when answering potential nodes."""
    name, ns = claim.metadata.name, claim.metadata.namespace
    found = [
        p
        for p in pods
        if not p.spec.node_name
        and p.metadata.namespace == ns
        and any(r.claim_name == name for r in pod_claim_refs(p))
    ]
    return sorted(
        found, key=lambda p: (not is_controlled_by(claim.metadata, p.metadata.uid), p.metadata.name)
    )
