"""sync_pod / sync_claim: the upstream controller's scenarios, crash recovery, release rules."""

from __future__ import annotations

import pytest

from events.api.core_v1 import Pod
from services.claim_controller import (
    AddReservedFor,
    CreateClaim,
    Deallocate,
    DeleteClaim,
    RecordEvent,
    RecordPodClaimStatus,
    RemoveFinalizer,
    RemoveReservedFor,
    SeededSuffixes,
    apply_to_claim,
    hash_suffix,
    release_reservations,
    sync_claim,
    sync_pod,
)
from services.dra.resourceclaim import DELETE_PROTECTION_FINALIZER, POD_CLAIM_NAME_ANNOTATION
from tests.builders import make_allocation, make_claim, make_pod, make_template, pod_ref

FIN = (DELETE_PROTECTION_FINALIZER,)


# -- sync_pod ------------------------------------------------------------------------------------


def test_create_claim_from_template_with_annotation_owner_and_status() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"})
    template = make_template("single-gpu", labels={"team": "a"}, annotations={"note": "x"})
    actions = sync_pod(pod, [], [template])
    create, record = actions
    assert isinstance(create, CreateClaim) and isinstance(record, RecordPodClaimStatus)
    assert create.generate_name == "pod0-gpu-"
    assert create.name == "pod0-gpu-" + hash_suffix("default/uid-pod0/gpu", 0)
    assert create.annotations == {"note": "x", POD_CLAIM_NAME_ANNOTATION: "gpu"}
    assert create.labels == {"team": "a"}
    ref = create.owner_reference
    assert (ref.api_version, ref.kind, ref.name, ref.uid) == ("v1", "Pod", "pod0", "uid-pod0")
    assert ref.controller is True and ref.block_owner_deletion is True
    assert create.claim.spec == template.spec.spec
    claim = create.to_claim()
    assert claim.metadata.generate_name == "pod0-gpu-" and claim.metadata.owner_references == (ref,)
    assert [(s.name, s.resource_claim_name) for s in record.statuses] == [("gpu", create.name)]


def test_nop_when_claim_exists_and_is_recorded() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"}, statuses={"gpu": "pod0-gpu-abcde"})
    claim = make_claim("pod0-gpu-abcde", owner_pod=pod, annotations={POD_CLAIM_NAME_ANNOTATION: "gpu"})
    assert sync_pod(pod, [claim], [make_template()]) == []


def test_recreate_a_recorded_claim_that_was_deleted() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"}, statuses={"gpu": "pod0-gpu-abcde"})
    actions = sync_pod(pod, [], [make_template()])
    create, record = actions
    assert isinstance(create, CreateClaim) and isinstance(record, RecordPodClaimStatus)
    assert record.statuses[0].resource_claim_name == create.name


def test_recorded_claim_not_owned_by_the_pod_is_replaced_by_a_new_one() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"}, statuses={"gpu": "pod0-gpu-abcde"})
    stranger = make_claim("pod0-gpu-abcde")  # same name, no owner
    create, record = sync_pod(pod, [stranger], [make_template()])
    assert isinstance(create, CreateClaim) and create.name != "pod0-gpu-abcde"
    assert isinstance(record, RecordPodClaimStatus)


def test_crash_recovery_adopts_the_claim_created_before_the_status_was_recorded() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"})
    orphan = make_claim("pod0-gpu-zzzzz", owner_pod=pod, annotations={POD_CLAIM_NAME_ANNOTATION: "gpu"})
    actions = sync_pod(pod, [orphan], [])  # no template needed to adopt
    (recorded,) = actions
    assert isinstance(recorded, RecordPodClaimStatus)
    assert recorded == RecordPodClaimStatus(
        namespace="default", pod_name="pod0", pod_uid="uid-pod0", statuses=recorded.statuses
    )
    assert recorded.statuses[0].resource_claim_name == "pod0-gpu-zzzzz"


def test_claims_of_other_pods_or_other_pod_claims_are_not_adopted() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"})
    other_pod = make_pod("pod0", uid="uid-old-pod0", template_claims={"gpu": "single-gpu"})
    foreign = make_claim("a", owner_pod=other_pod, annotations={POD_CLAIM_NAME_ANNOTATION: "gpu"})
    other_entry = make_claim("b", owner_pod=pod, annotations={POD_CLAIM_NAME_ANNOTATION: "net"})
    unannotated = make_claim("c", owner_pod=pod)
    actions = sync_pod(pod, [foreign, other_entry, unannotated], [make_template()])
    assert isinstance(actions[0], CreateClaim)


def test_missing_template_gives_a_warning_and_the_other_claims_still_proceed() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "nope", "net": "single-gpu"})
    actions = sync_pod(pod, [], [make_template()])
    warning, create, record = actions
    assert isinstance(warning, RecordEvent)
    assert (warning.type, warning.reason, warning.kind, warning.name) == (
        "Warning",
        "FailedResourceClaimCreation",
        "Pod",
        "pod0",
    )
    assert warning.message == (
        'PodResourceClaim gpu: resource claim template "nope": '
        'resourceclaimtemplate.resource.k8s.io "nope" not found'
    )
    assert isinstance(create, CreateClaim) and create.pod_claim_name == "net"
    assert isinstance(record, RecordPodClaimStatus) and [s.name for s in record.statuses] == ["net"]


def test_deleted_pods_pods_without_claims_and_user_claims_need_nothing() -> None:
    assert (
        sync_pod(make_pod(deleting=True, template_claims={"gpu": "single-gpu"}), [], [make_template()]) == []
    )
    assert sync_pod(make_pod(), [], [make_template()]) == []
    assert sync_pod(make_pod(claims={"gpu": "shared"}), [], []) == []


def test_terminal_pods_get_no_new_claims() -> None:
    pod = make_pod(template_claims={"gpu": "single-gpu"}, phase="Succeeded")
    assert sync_pod(pod, [], [make_template()]) == []


def test_claims_and_templates_of_other_namespaces_are_ignored() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"})
    elsewhere = make_template("single-gpu", namespace="other")
    warning = sync_pod(pod, [], [elsewhere])[0]
    assert isinstance(warning, RecordEvent)


def test_a_status_entry_without_claim_name_means_no_claim_is_needed() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"}, statuses={"gpu": None})
    assert sync_pod(pod, [], [make_template()]) == []


def test_generated_name_avoids_existing_claims() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"})
    first = sync_pod(pod, [], [make_template()])[0]
    assert isinstance(first, CreateClaim)
    clash = make_claim(first.name)
    second = sync_pod(pod, [clash], [make_template()])[0]
    assert isinstance(second, CreateClaim) and second.name != first.name


def test_seeded_suffix_source_is_injectable() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"})
    a = sync_pod(pod, [], [make_template()], suffixes=SeededSuffixes(1))[0]
    b = sync_pod(pod, [], [make_template()], suffixes=SeededSuffixes(1))[0]
    assert isinstance(a, CreateClaim) and isinstance(b, CreateClaim) and a.name == b.name


def test_bound_pod_gets_reserved_on_its_allocated_claim() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"}, statuses={"gpu": "c1"}, node="worker")
    claim = make_claim("c1", owner_pod=pod, allocation=make_allocation(("gpu", "gpu-0")), finalizers=FIN)
    assert sync_pod(pod, [claim], [make_template()]) == [
        AddReservedFor(namespace="default", claim_name="c1", claim_uid="uid-c1", consumer=pod_ref("pod0"))
    ]
    reserved = apply_to_claim(claim, sync_pod(pod, [claim], [])[0])
    assert sync_pod(pod, [reserved], []) == []


def test_unbound_pods_and_unallocated_claims_are_left_to_the_scheduler() -> None:
    pod = make_pod("pod0", claims={"gpu": "shared"})
    allocated = make_claim("shared", allocation=make_allocation(("gpu", "gpu-0")))
    assert sync_pod(pod, [allocated], []) == []
    bound = make_pod("pod0", claims={"gpu": "shared"}, node="worker")
    assert sync_pod(bound, [make_claim("shared")], []) == []


def test_reservation_pass_reserves_in_spec_order_and_stops_at_a_claim_not_yet_known() -> None:
    # make_pod lists direct claims before template claims.
    pod = make_pod(
        "pod0", template_claims={"gpu": "t"}, claims={"b": "shared"}, node="n", statuses={"gpu": "x"}
    )
    not_owned = make_claim("x", allocation=make_allocation(("gpu", "gpu-0")))
    shared = make_claim("shared", allocation=make_allocation(("gpu", "gpu-1")))
    actions = sync_pod(pod, [not_owned, shared], [make_template("t")])
    # The foreign claim "x" is replaced by a new one; "shared" is reserved; the new claim is not
    # in the projection yet, so the pass ends there (it gets reserved once allocated).
    assert [type(a) for a in actions] == [CreateClaim, RecordPodClaimStatus, AddReservedFor]
    assert isinstance(actions[2], AddReservedFor) and actions[2].claim_name == "shared"


def test_bound_pod_already_reserved_needs_nothing() -> None:
    pod = make_pod("pod0", claims={"a": "foreign"}, node="n")
    foreign = make_claim("foreign", allocation=make_allocation(("gpu", "gpu-0")), reserved_for=["pod0"])
    assert sync_pod(pod, [foreign], []) == []


# -- sync_claim ----------------------------------------------------------------------------------


def test_reservation_of_a_live_pod_stays() -> None:
    pod = make_pod("pod0", claims={"gpu": "c"}, node="n", phase="Running")
    claim = make_claim(
        "c", allocation=make_allocation(("gpu", "gpu-0")), reserved_for=["pod0"], finalizers=FIN
    )
    assert sync_claim(claim, [pod]) == []


def test_last_reservation_gone_deallocates_then_unfinalizes() -> None:
    claim = make_claim(
        "c", allocation=make_allocation(("gpu", "gpu-0")), reserved_for=["pod0"], finalizers=FIN
    )
    assert sync_claim(claim, []) == [
        RemoveReservedFor(namespace="default", claim_name="c", claim_uid="uid-c", uids=("uid-pod0",)),
        Deallocate(namespace="default", claim_name="c", claim_uid="uid-c"),
        RemoveFinalizer(
            namespace="default", claim_name="c", claim_uid="uid-c", finalizer=DELETE_PROTECTION_FINALIZER
        ),
    ]


def test_one_of_two_reservations_gone_keeps_the_allocation() -> None:
    live = make_pod("pod1", claims={"gpu": "c"}, node="n", phase="Running")
    claim = make_claim(
        "c", allocation=make_allocation(("gpu", "gpu-0")), reserved_for=["pod0", "pod1"], finalizers=FIN
    )
    assert sync_claim(claim, [live]) == [
        RemoveReservedFor(namespace="default", claim_name="c", claim_uid="uid-c", uids=("uid-pod0",))
    ]


@pytest.mark.parametrize(
    "pod",
    [
        make_pod("pod0", claims={"gpu": "c"}, phase="Succeeded"),
        make_pod("pod0", claims={"gpu": "c"}, phase="Failed"),
        make_pod("pod0", claims={"gpu": "c"}, deleting=True),  # deleted before it was scheduled
        make_pod("pod0", uid="uid-new", claims={"gpu": "c"}, node="n"),  # replaced under the same name
    ],
    ids=["succeeded", "failed", "deleted-unscheduled", "replaced"],
)
def test_done_or_replaced_pods_lose_their_reservation(pod: Pod) -> None:
    claim = make_claim("c", allocation=make_allocation(("gpu", "gpu-0")), reserved_for=["pod0"])
    assert sync_claim(claim, [pod]) == [
        RemoveReservedFor(namespace="default", claim_name="c", claim_uid="uid-c", uids=("uid-pod0",))
    ]


def test_deleted_but_scheduled_pod_keeps_its_reservation_until_the_kubelet_is_done() -> None:
    pod = make_pod("pod0", claims={"gpu": "c"}, node="n", deleting=True, phase="Running")
    claim = make_claim(
        "c", allocation=make_allocation(("gpu", "gpu-0")), reserved_for=["pod0"], finalizers=FIN
    )
    assert sync_claim(claim, [pod]) == []


def test_claim_without_finalizer_keeps_its_allocation() -> None:
    done = make_pod("pod0", claims={"gpu": "c"}, phase="Succeeded")
    claim = make_claim("c", allocation=make_allocation(("gpu", "gpu-0")), reserved_for=["pod0"])
    assert [type(a) for a in sync_claim(claim, [done])] == [RemoveReservedFor]


@pytest.mark.parametrize("allocated", [True, False])
def test_deleted_unused_claim_is_deallocated_and_unfinalized(allocated: bool) -> None:
    allocation = make_allocation(("gpu", "gpu-0")) if allocated else None
    claim = make_claim("c", allocation=allocation, finalizers=FIN, deleting=True)
    expected = [Deallocate, RemoveFinalizer] if allocated else [RemoveFinalizer]
    assert [type(a) for a in sync_claim(claim, [])] == expected


def test_allocated_unreserved_user_claim_is_left_alone() -> None:
    # Deallocation follows the transition "was used, is no longer": a claim the scheduler just
    # allocated (reservation still coming) must not be freed.
    claim = make_claim("c", allocation=make_allocation(("gpu", "gpu-0")), finalizers=FIN)
    assert sync_claim(claim, []) == []


def test_generated_claim_of_a_done_pod_is_deleted() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "t"}, phase="Succeeded")
    claim = make_claim(
        "c",
        owner_pod=pod,
        allocation=make_allocation(("gpu", "gpu-0")),
        reserved_for=["pod0"],
        finalizers=FIN,
    )
    actions = sync_claim(claim, [pod])
    assert [type(a) for a in actions] == [RemoveReservedFor, Deallocate, RemoveFinalizer, DeleteClaim]
    assert actions[-1] == DeleteClaim(
        namespace="default", claim_name="c", claim_uid="uid-c", reason="owning pod default/pod0 is done"
    )


def test_generated_claim_of_a_gone_or_replaced_pod_is_deleted() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "t"})
    claim = make_claim("c", owner_pod=pod)
    gone = sync_claim(claim, [])
    assert gone == [
        DeleteClaim(
            namespace="default", claim_name="c", claim_uid="uid-c", reason="owning pod default/pod0 is gone"
        )
    ]
    replaced = sync_claim(claim, [make_pod("pod0", uid="uid-2")])
    assert isinstance(replaced[0], DeleteClaim) and replaced[0].reason.endswith("was replaced")


def test_generated_claim_of_a_live_pod_or_being_deleted_is_not_deleted_again() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "t"})
    assert sync_claim(make_claim("c", owner_pod=pod), [pod]) == []
    assert sync_claim(make_claim("c", owner_pod=pod, deleting=True), []) == []


def test_other_consumer_kinds_are_kept() -> None:
    from events.api.resource_v1 import ResourceClaimConsumerReference

    group = ResourceClaimConsumerReference(
        api_group="scheduling.k8s.io", resource="podgroups", name="g", uid="g1"
    )
    claim = make_claim(
        "c", allocation=make_allocation(("gpu", "gpu-0")), reserved_for=[group, "pod0"], finalizers=FIN
    )
    assert sync_claim(claim, []) == [
        RemoveReservedFor(namespace="default", claim_name="c", claim_uid="uid-c", uids=("uid-pod0",))
    ]


def test_release_by_the_kubelet_frees_a_shared_claim_like_the_controller_would() -> None:
    claim = make_claim(
        "shared", allocation=make_allocation(("gpu", "gpu-0")), reserved_for=["p0", "p1"], finalizers=FIN
    )
    first = release_reservations(claim, ["uid-p0"])
    assert first == [
        RemoveReservedFor(namespace="default", claim_name="shared", claim_uid="uid-shared", uids=("uid-p0",))
    ]
    claim = apply_to_claim(claim, first[0])
    last = release_reservations(claim, ["uid-p1", "uid-unknown"])
    assert [type(a) for a in last] == [RemoveReservedFor, Deallocate, RemoveFinalizer]
    for action in last:
        claim = apply_to_claim(claim, action)
    assert (
        claim.status.allocation is None
        and claim.status.reserved_for == ()
        and claim.metadata.finalizers == ()
    )
    assert release_reservations(claim, ["uid-p1"]) == []
    assert sync_claim(claim, []) == []  # a user claim stays, unallocated
