"""Kubelet admission of a pod bound to this node: may it use its claims?

The checks of upstream ``PrepareResources`` that come before any driver is called (and before the
claim-info cache is touched): each claim the pod refers to must exist, a claim generated from a
template must be controlled by the pod, the pod's uid must be in ``status.reservedFor``, the claim
must be allocated and every driver in its allocation must be registered on this node. The special
claim for extended resources backed by DRA (``pod.status.extendedResourceClaimStatus``) is checked
the same way. A refusal becomes a Warning event on the pod (reason
``FailedPrepareDynamicResources``); the pod stays Pending and the kubelet tries again after a
backoff (upstream's pod worker retries ``SyncPod``), so it starts once its claims are ready.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.services.dra.claimactions import ClaimAction
from draflow.services.dra.claimactions import release_reservations as release_claim
from draflow.services.dra.resourceclaim import (
    ClaimNameError,
    is_for_pod,
    is_reserved_for_pod,
    pod_claim_names,
)

__all__ = ["FAILED_PREPARE", "Admit", "Reject", "admit", "release_reservations"]

FAILED_PREPARE = "FailedPrepareDynamicResources"


@dataclass(frozen=True, slots=True)
class Admit:
    """The pod may start; ``claims`` are the ones to prepare, in pod-spec order (extended last)."""

    claims: tuple[ResourceClaim, ...] = ()


@dataclass(frozen=True, slots=True)
class Reject:
    """The pod may not start: ``reason`` and ``message`` are those of the Warning event."""

    reason: str
    message: str


def _reject(message: str) -> Reject:
    return Reject(reason=FAILED_PREPARE, message=f"Failed to prepare dynamic resources: {message}")


def admit(
    pod: Pod,
    claims: Mapping[str, ResourceClaim] | Iterable[ResourceClaim],
    *,
    registered_drivers: Collection[str] | None = None,
) -> Admit | Reject:
    """Decide whether ``pod`` may use its claims on this node.

    ``claims``: the claims of the pod's namespace (a name -> claim map or any iterable).
    ``registered_drivers``: the drivers with a node plugin here; None skips that check.
    """
    if isinstance(claims, Mapping):
        by_name = dict(claims)
    else:
        by_name = {c.metadata.name: c for c in claims if c.metadata.namespace == pod.metadata.namespace}
    try:
        names = pod_claim_names(pod)
    except ClaimNameError as err:
        return _reject(str(err))
    admitted: list[ResourceClaim] = []
    for name, must_check_owner in names:
        claim = by_name.get(name)
        if claim is None:
            return _reject(f'fetch ResourceClaim {name}: resourceclaims.resource.k8s.io "{name}" not found')
        if must_check_owner:
            problem = is_for_pod(pod, claim)
            if problem is not None:
                return _reject(problem)
        if not is_reserved_for_pod(pod, claim):
            return _reject(
                f"pod {pod.metadata.name} ({pod.metadata.uid}) is not allowed to use ResourceClaim "
                f"{name} ({claim.metadata.uid})"
            )
        allocation = claim.status.allocation
        if allocation is None:
            return _reject(f"ResourceClaim {name}: not allocated")
        if registered_drivers is not None:
            for result in allocation.devices.results:
                if result.driver not in registered_drivers:
                    return _reject(
                        f"DRA driver {result.driver} is not registered (needed by ResourceClaim {name})"
                    )
        admitted.append(claim)
    return Admit(claims=tuple(admitted))


def release_reservations(
    pod: Pod, claims: Mapping[str, ResourceClaim] | Iterable[ResourceClaim]
) -> list[ClaimAction]:
    """After the pod's claims are unprepared: drop the pod from their ``reservedFor``.

    Same rule as the claim controller (``draflow.services.dra.claimactions.release_reservations``): removing
    the last reservation of a protected claim also deallocates it and removes the finalizer. The controller
    does the same when it sees the pod gone; whichever comes first wins, the other finds nothing.
    """
    if isinstance(claims, Mapping):
        by_name = dict(claims)
    else:
        by_name = {c.metadata.name: c for c in claims if c.metadata.namespace == pod.metadata.namespace}
    try:
        names = [name for name, _ in pod_claim_names(pod)]
    except ClaimNameError:
        names = [s.resource_claim_name for s in pod.status.resource_claim_statuses if s.resource_claim_name]
    actions: list[ClaimAction] = []
    for name in dict.fromkeys(names):
        claim = by_name.get(name)
        if claim is not None:
            actions += release_claim(claim, [pod.metadata.uid])
    return actions
