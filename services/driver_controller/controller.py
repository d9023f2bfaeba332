"""The driver controller's decider: what to do next for one classic claim (actions as data).

``sync_claim`` looks only at the claim, its class and what the controller's projection knows
(is a saga running for the claim, for which potential nodes were unsuitable nodes last
published; without that, the answer recorded in the claim's ``answeredPotentialNodes``). It
never calls the driver; the shell turns actions into saga starts or appends:

* ``AddFinalizer`` always comes before an allocation (KEP: the driver sets its finalizer before it
  attempts to allocate), so a claim is never allocated without protection against deletion;
* ``StartAllocation`` for a Pending claim in Immediate mode, or in Delayed mode once the scheduler
  has set ``selectedNode`` (the allocation saga, see :mod:`draflow.services.driver_controller.sagas`);
* ``UpdateUnsuitableNodes`` when the scheduler published potential nodes not answered yet
  (:func:`unsuitable_updates` asks the plugin for all of the pod's claims together);
* ``StartDeallocation`` for phase Reallocate (reallocation saga) or for a deleted, allocated claim
  with no users left (teardown); the saga frees, resets to Pending and removes the finalizer;
* ``RemoveFinalizer`` for a deleted claim that holds nothing;
* ``Wait`` explains why nothing happens now (shown by ``draflow explain``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

import msgspec

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import core_v1 as c1
from draflow.services.dra.classic import claims as cl
from draflow.services.dra.classic.plugin import ClaimAllocation, ControllerPlugin, Parameters
from draflow.services.dra.classic.podclaims import pod_claim_refs

__all__ = [
    "DEALLOCATE_DELETED",
    "DEALLOCATE_REALLOCATE",
    "Action",
    "AddFinalizer",
    "RemoveFinalizer",
    "StartAllocation",
    "StartDeallocation",
    "UpdateUnsuitableNodes",
    "Wait",
    "sync_claim",
    "unsuitable_updates",
]

DEALLOCATE_REALLOCATE = "Reallocate"
DEALLOCATE_DELETED = "Deleted"


class AddFinalizer(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    finalizer: str


class RemoveFinalizer(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    finalizer: str


class StartAllocation(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """Run the allocation saga; ``selected_node`` None lets the driver choose (Immediate)."""

    selected_node: str | None = None


class StartDeallocation(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    reason: str  # DEALLOCATE_REALLOCATE or DEALLOCATE_DELETED


class UpdateUnsuitableNodes(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """Ask the driver which of these nodes cannot work and publish the answer."""

    potential_nodes: tuple[str, ...]


class Wait(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    reason: str


Action: TypeAlias = (
    AddFinalizer | RemoveFinalizer | StartAllocation | StartDeallocation | UpdateUnsuitableNodes | Wait
)


def _deleting(claim: cv.ResourceClaim, driver_name: str) -> list[Action]:
    phase = cl.phase(claim)
    fin = cl.finalizer_for(driver_name)
    if phase in (cv.ALLOCATED, cv.REALLOCATE):
        users = claim.status.reserved_for
        if users:
            names = ", ".join(f"{u.kind}/{u.name}" for u in users)
            return [Wait(reason=f"claim is being deleted but still reserved for {names}")]
        return [StartDeallocation(reason=DEALLOCATE_DELETED)]
    if fin in claim.metadata.finalizers:
        return [RemoveFinalizer(finalizer=fin)]
    return []


def sync_claim(
    claim: cv.ResourceClaim,
    resource_class: cv.ResourceClass | None,
    *,
    driver_name: str,
    saga_running: bool = False,
    answered_potential_nodes: tuple[str, ...] | None = None,
) -> list[Action]:
    """The next actions of this driver for ``claim`` (empty: nothing to do, not ours)."""
    if not cl.owned_by_driver(claim, resource_class, driver_name):
        return []
    if saga_running:
        return [Wait(reason="an allocation or deallocation saga is running for this claim")]
    if cl.is_deleting(claim):
        return _deleting(claim, driver_name)
    phase = cl.phase(claim)
    fin = cl.finalizer_for(driver_name)
    if phase == cv.REALLOCATE:
        if claim.status.reserved_for:
            return [Wait(reason="Reallocate requested but the claim is in use; waiting for its users to go")]
        return [StartDeallocation(reason=DEALLOCATE_REALLOCATE)]
    if phase == cv.ALLOCATED:
        # An allocated claim always carries the finalizer; put it back if someone removed it.
        return [] if fin in claim.metadata.finalizers else [AddFinalizer(finalizer=fin)]
    if resource_class is None:
        return [Wait(reason=f"ResourceClass {claim.spec.resource_class_name!r} not found")]
    sched = cl.scheduling(claim)
    selected = sched.scheduler.selected_node
    if claim.spec.allocation_mode == cv.IMMEDIATE or selected:
        if fin not in claim.metadata.finalizers:
            return [AddFinalizer(finalizer=fin)]
        return [StartAllocation(selected_node=selected or None)]
    potential = sched.scheduler.potential_nodes
    answered = answered_potential_nodes
    if answered is None:  # nothing in memory (a restarted controller): the recorded answer
        answered = sched.driver.answered_potential_nodes
    if potential and potential != answered:
        return [UpdateUnsuitableNodes(potential_nodes=potential)]
    return []


def unsuitable_updates(
    plugin: ControllerPlugin,
    pod: c1.Pod | None,
    claims: Sequence[cv.ResourceClaim],
    classes: Mapping[str, cv.ResourceClass],
) -> list[cv.ResourceClaim]:
    """Carry out ``UpdateUnsuitableNodes`` for all of a pod's claims of this driver at once.

    The plugin sees every pending Delayed claim of the pod that has potential nodes (grouped by
    their potential nodes, which PreScore sets alike), so it can account for them jointly (two
    2Gi claims need 4Gi on one node). Returns the claims whose answer changes: ``unsuitableNodes``
    and ``answeredPotentialNodes`` (the list answered), so an answer of "none unsuitable" is
    written too and the scheduler can tell it from no answer yet.
    """
    names = {r.claim_name: r.pod_claim_name for r in pod_claim_refs(pod)} if pod is not None else {}
    groups: dict[tuple[str, ...], list[ClaimAllocation]] = {}
    for claim in claims:
        cls = classes.get(claim.spec.resource_class_name)
        potential = cl.scheduling(claim).scheduler.potential_nodes
        if (
            cls is None
            or not cl.owned_by_driver(claim, cls, plugin.driver_name)
            or cl.phase(claim) != cv.PENDING
            or claim.spec.allocation_mode == cv.IMMEDIATE
            or cl.is_deleting(claim)
            or not potential
        ):
            continue
        params = Parameters(class_parameters=cls.parameters, claim_parameters=claim.spec.parameters)
        name = claim.metadata.name
        ca = ClaimAllocation(
            pod_claim_name=names.get(name, name), claim=claim, resource_class=cls, parameters=params
        )
        groups.setdefault(potential, []).append(ca)
    out = []
    for potential, cas in groups.items():
        answer = plugin.unsuitable_nodes(pod, cas, potential)
        for ca in cas:
            new = cl.with_driver_answer(ca.claim, potential, tuple(answer.get(ca.claim.metadata.name, ())))
            if new != ca.claim:
                out.append(new)
    return out
