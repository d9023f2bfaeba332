"""The claim controller run to a fixpoint: lifecycles and random states converge cleanly."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from events.api.core_v1 import Pod
from events.api.resource_v1 import ResourceClaim, ResourceClaimTemplate
from services.claim_controller import (
    ClaimAction,
    CreateClaim,
    Deallocate,
    DeleteClaim,
    RemoveFinalizer,
    RemoveReservedFor,
    apply_to_claim,
    apply_to_pod,
    hash_suffix,
    sync_claim,
    sync_pod,
)
from services.dra.resourceclaim import DELETE_PROTECTION_FINALIZER, POD_CLAIM_NAME_ANNOTATION
from tests.builders import make_allocation, make_claim, make_pod, make_template, pod_ref

FIN = (DELETE_PROTECTION_FINALIZER,)


class World:
    """Applies actions like the reducers will, so a test can run the deciders to a fixpoint."""

    def __init__(self, pods=(), claims=(), templates=()) -> None:
        self.pods: dict[str, Pod] = {p.metadata.name: p for p in pods}
        self.claims: dict[str, ResourceClaim] = {c.metadata.name: c for c in claims}
        self.templates: list[ResourceClaimTemplate] = list(templates)
        self.log: list[ClaimAction] = []

    def apply(self, actions: list[ClaimAction]) -> None:
        for action in actions:
            self.log.append(action)
            if isinstance(action, CreateClaim):
                claim = action.to_claim()
                meta = msgspec.structs.replace(claim.metadata, uid=f"uid-{action.name}")
                self.claims[action.name] = msgspec.structs.replace(claim, metadata=meta)
            elif isinstance(action, DeleteClaim):
                claim = self.claims[action.claim_name]
                if claim.metadata.finalizers:
                    meta = msgspec.structs.replace(claim.metadata, deletion_timestamp="2026-01-01T00:00:01Z")
                    self.claims[action.claim_name] = msgspec.structs.replace(claim, metadata=meta)
                else:
                    del self.claims[action.claim_name]
            else:
                self.pods = {n: apply_to_pod(p, action) for n, p in self.pods.items()}
                self.claims = {n: apply_to_claim(c, action) for n, c in self.claims.items()}
        # The API server removes a deleted object once its finalizers are gone.
        for name, claim in list(self.claims.items()):
            if claim.metadata.deletion_timestamp and not claim.metadata.finalizers:
                del self.claims[name]

    def sync_all(self, suffixes=hash_suffix) -> list[ClaimAction]:
        actions: list[ClaimAction] = []
        for pod in list(self.pods.values()):
            step = sync_pod(
                self.pods[pod.metadata.name], self.claims.values(), self.templates, suffixes=suffixes
            )
            self.apply(step)
            actions += step
        for name in list(self.claims):
            if name in self.claims:
                step = sync_claim(self.claims[name], self.pods.values())
                self.apply(step)
                actions += step
        return actions

    def converge(self, rounds: int = 5) -> None:
        for _ in range(rounds):
            if not self.sync_all():
                return
        raise AssertionError(f"no fixpoint after {rounds} rounds: {self.log[-5:]}")


# -- convergence ---------------------------------------------------------------------------------


def test_template_pod_lifecycle_converges_and_cleans_up() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"})
    world = World(pods=[pod], templates=[make_template()])
    world.converge()
    (claim,) = world.claims.values()
    assert world.pods["pod0"].status.resource_claim_statuses[0].resource_claim_name == claim.metadata.name

    # The scheduler allocates and reserves; the pod runs.
    allocated = msgspec.structs.replace(
        claim,
        metadata=msgspec.structs.replace(claim.metadata, finalizers=FIN),
        status=msgspec.structs.replace(
            claim.status, allocation=make_allocation(("gpu", "gpu-0")), reserved_for=(pod_ref("pod0"),)
        ),
    )
    world.claims[claim.metadata.name] = allocated
    world.pods["pod0"] = msgspec.structs.replace(
        world.pods["pod0"],
        spec=msgspec.structs.replace(pod.spec, node_name="worker"),
        status=msgspec.structs.replace(world.pods["pod0"].status, phase="Running"),
    )
    assert world.sync_all() == []

    # The pod is removed: reservation dropped, deallocated, unfinalized, claim deleted.
    del world.pods["pod0"]
    world.converge()
    assert world.claims == {}
    assert [type(a) for a in world.log[-4:]] == [RemoveReservedFor, Deallocate, RemoveFinalizer, DeleteClaim]


def test_two_pods_from_one_template_get_distinct_claims() -> None:
    world = World(
        pods=[make_pod(f"pod{i}", template_claims={"gpu": "single-gpu"}) for i in range(2)],
        templates=[make_template()],
    )
    world.converge()
    assert len(world.claims) == 2
    owners = sorted(c.metadata.owner_references[0].name for c in world.claims.values())
    assert owners == ["pod0", "pod1"]


# -- property: any mix of pods and claims converges to a clean state ------------------------------

POD_STATES = st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "deleting", "gone"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(POD_STATES, st.booleans(), st.booleans()), min_size=1, max_size=5))
def test_random_pods_converge(specs) -> None:
    """Pods with template claims in random states, some pre-existing reserved claims: after
    converging, every live pod has exactly its one recorded, owned claim, and no claim is reserved
    for a pod that is gone or done or kept for a pod that no longer needs it."""
    pods, claims = [], []
    for i, (state, prepared, bound) in enumerate(specs):
        name = f"pod{i}"
        pod = make_pod(
            name,
            template_claims={"gpu": "single-gpu"},
            phase=state if state in ("Pending", "Running", "Succeeded", "Failed") else "Running",
            node="n" if bound else "",
            deleting=state == "deleting",
        )
        if prepared:
            claim_name = f"{name}-gpu-abcde"
            claims.append(
                make_claim(
                    claim_name,
                    owner_pod=pod,
                    annotations={POD_CLAIM_NAME_ANNOTATION: "gpu"},
                    allocation=make_allocation(("gpu", f"gpu-{i}")),
                    reserved_for=[name],
                    finalizers=FIN,
                )
            )
        if state != "gone":
            pods.append(pod)
    world = World(pods=pods, claims=claims, templates=[make_template()])
    world.converge(rounds=6)

    live = {
        p.metadata.name: p
        for p in world.pods.values()
        if p.status.phase not in ("Succeeded", "Failed") and p.metadata.deletion_timestamp is None
    }
    for claim in world.claims.values():
        owner = claim.metadata.owner_references[0].name
        assert owner in world.pods, f"{claim.metadata.name} outlived its pod"
        for ref in claim.status.reserved_for:
            held = world.pods.get(ref.name)
            assert held is not None and held.status.phase not in ("Succeeded", "Failed")
        if not claim.status.reserved_for:
            assert claim.status.allocation is None or owner in live
    for name, pod in live.items():
        recorded = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses}
        assert recorded["gpu"] in world.claims
        owned = [c for c in world.claims.values() if c.metadata.owner_references[0].name == name]
        assert len(owned) == 1
