"""sync_claim, the saga plans and the scheduler decisions, case by case."""

from __future__ import annotations

from typing import Any, cast

import pytest
from msgspec.structs import replace

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import core_v1 as c1
from draflow.events.api.meta import ObjectMeta, OwnerReference
from draflow.services.dra.classic import claims as cl
from draflow.services.dra.classic.nodeselect import node_names_selector
from draflow.services.dra.classic.plugin import AllocationResult
from draflow.services.dra.classic.podclaims import Blocked, CreateClaim, DeleteClaim, sync_pod
from draflow.services.driver_controller import controller as ctl
from draflow.services.driver_controller import saga_wiring as wiring
from draflow.services.driver_controller import sagas
from draflow.services.driver_controller.saga_wiring import ClaimStep
from draflow.services.drivers.acme_gpu import AcmeGpuController, AcmeGpuNodePlugin, GpuInfo
from draflow.services.scheduler.plugins.classic import scheduling as sch
from tests.builders import make_node
from tests.builders.classic import make_classic_claim

pytestmark = pytest.mark.kep3063

D = "gpu.acme.com"
FIN = "gpu.acme.com/deletion-protection"
CLASS = cv.ResourceClass(metadata=ObjectMeta(name="acme-gpu"), driver_name=D)


def claim(mode: str = cv.DELAYED, **status: Any) -> cv.ResourceClaim:
    """The claim ``g`` of these tests: 2Gi of an ACME GPU."""
    return make_classic_claim("g", "acme-gpu", {"memory": "2Gi"}, mode=mode, **status)


def sync(c: cv.ResourceClaim, **kw: object) -> list[ctl.Action]:
    return ctl.sync_claim(c, CLASS, driver_name=D, **kw)  # type: ignore[arg-type]


def test_sync_claim_table() -> None:
    assert sync(claim()) == []  # delayed, nothing from the scheduler yet
    assert ctl.sync_claim(claim(), CLASS, driver_name="other.example.com") == []  # not ours
    imm = claim(cv.IMMEDIATE)
    assert sync(imm) == [ctl.AddFinalizer(finalizer=FIN)]  # finalizer before allocating
    assert sync(cl.with_finalizer(imm, D)) == [ctl.StartAllocation(selected_node=None)]
    selected = cl.with_finalizer(cl.with_selected_node(claim(), "n1"), D)
    assert sync(selected) == [ctl.StartAllocation(selected_node="n1")]
    assert sync(selected, saga_running=True) == [
        ctl.Wait(reason="an allocation or deallocation saga is running for this claim")
    ]
    potential = cl.with_potential_nodes(claim(), ("n1", "n2"))
    assert sync(potential) == [ctl.UpdateUnsuitableNodes(potential_nodes=("n1", "n2"))]
    assert sync(potential, answered_potential_nodes=("n1", "n2")) == []
    assert ctl.sync_claim(claim(), None, driver_name=D) == []  # unknown class: cannot tell the driver
    gone_class = replace(imm, status=replace(imm.status, driver_name=D))
    assert ctl.sync_claim(gone_class, None, driver_name=D) == [
        ctl.Wait(reason="ResourceClass 'acme-gpu' not found")
    ]
    alloc = cl.allocated(cl.with_finalizer(claim(), D), D, AllocationResult())
    assert sync(alloc) == []
    assert sync(cl.without_finalizer(alloc, D)) == [ctl.AddFinalizer(finalizer=FIN)]
    assert sync(cl.reallocate(alloc)) == [ctl.StartDeallocation(reason=ctl.DEALLOCATE_REALLOCATE)]
    user = OwnerReference(api_version="v1", kind="Pod", name="p", uid="u")
    assert sync(cl.reallocate(cl.reserved(alloc, user)))[0].__class__ is ctl.Wait


def test_the_drivers_answer_is_recorded_even_when_no_node_is_unsuitable() -> None:
    """``answeredPotentialNodes`` tells "none unsuitable" from "not answered yet": the answer is
    written once per published list, and a controller without memory of it (restarted) reads it
    from the claim instead of answering again."""
    acme = AcmeGpuController()
    for node, memory in (("n1", "4Gi"), ("n2", "1Gi")):
        acme.observe(
            AcmeGpuNodePlugin(node_name=node, gpus=[GpuInfo(name="gpu-0", memory=memory)]).capacity()
        )
    classes = {"acme-gpu": CLASS}
    published = cl.with_potential_nodes(claim(), ("n1",))
    assert not cl.driver_answered(published)
    (answered,) = ctl.unsuitable_updates(acme, None, [published], classes)
    assert cl.scheduling(answered).driver == cv.DriverSchedulingStatus(answered_potential_nodes=("n1",))
    assert cl.driver_answered(answered)
    assert ctl.unsuitable_updates(acme, None, [answered], classes) == []  # nothing new to write
    assert sync(answered) == []  # the recorded answer stands in for the controller's memory
    republished = cl.with_potential_nodes(answered, ("n1", "n2"))
    assert not cl.driver_answered(republished)  # an answer to an older list
    assert sync(republished) == [ctl.UpdateUnsuitableNodes(potential_nodes=("n1", "n2"))]
    (again,) = ctl.unsuitable_updates(acme, None, [republished], classes)
    assert cl.scheduling(again).driver.unsuitable_nodes == ("n2",)
    assert cl.driver_answered(again)


def test_sync_claim_deletion() -> None:
    alloc = cl.allocated(cl.with_finalizer(claim(), D), D, AllocationResult())
    deleting = replace(alloc, metadata=replace(alloc.metadata, deletion_timestamp="2026-01-01T00:00:00Z"))
    assert sync(deleting) == [ctl.StartDeallocation(reason=ctl.DEALLOCATE_DELETED)]
    pending = cl.deallocated(deleting)
    assert sync(pending) == [ctl.RemoveFinalizer(finalizer=FIN)]
    assert sync(cl.without_finalizer(pending, D)) == []


def _action(fn: object) -> str | None:
    return None if fn is None else cast(ClaimStep, fn).action


def test_sagas_register_compensations_for_undoable_steps() -> None:
    assert [(s.name, _action(s.compensate)) for s in wiring.ALLOCATION.steps] == [
        ("check-claim", "RecordFailure"),
        ("set-finalizer", "RemoveFinalizer"),
        ("allocate-and-record", "UndoAllocate"),
    ]
    assert [_action(s.action) for s in wiring.REALLOCATION.steps] == [
        "CheckFreeable",
        "DriverDeallocate",
        "RecordPending",
        "RemoveFinalizer",
    ]
    # only the check is undone (the Reallocate request is cancelled); a free is never undone
    undo = [_action(s.compensate) for s in wiring.REALLOCATION.steps]
    assert undo == ["CancelReallocation", None, None, None]
    assert all(s.compensate is None for s in wiring.TEARDOWN.steps)
    assert all(d.input_type is sagas.SagaInput for d in wiring.SAGAS)
    assert wiring.plan_for(ctl.StartDeallocation(reason=ctl.DEALLOCATE_DELETED)) is wiring.TEARDOWN
    assert sagas.saga_id(wiring.ALLOCATION.saga_type, claim(), 7) == "ClassicAllocation-uid-g-7"


def test_run_action_guards() -> None:
    acme = AcmeGpuController()
    inp = sagas.SagaInput(namespace="default", name="g", uid="uid-g", driver_name=D, selected_node="n1")
    c = cl.with_selected_node(claim(), "n1")
    assert sagas.run_action("CheckPending", c, CLASS, acme, inp) == sagas.Done()
    moved = cl.with_selected_node(claim(), "n2")
    assert sagas.run_action("CheckPending", moved, CLASS, acme, inp) == sagas.Fail(
        reason="the selected node changed to 'n2'"
    )
    other = replace(c, metadata=replace(c.metadata, uid="uid-new"))
    assert sagas.run_action("CheckPending", other, CLASS, acme, inp) == sagas.Fail(
        reason="the claim was replaced (different uid)"
    )
    assert sagas.run_action("RemoveFinalizer", None, None, acme, inp) == sagas.Done(note="the claim is gone")
    # a definite failure marks the selected node unsuitable; a transient one only forgets it
    definite = sagas.run_action(
        "RecordFailure", c, CLASS, acme, inp, failure=sagas.Fail(reason="x", definite=True)
    )
    assert isinstance(definite, sagas.Done) and definite.claim is not None
    assert cl.scheduling(definite.claim).driver.unsuitable_nodes == ("n1",)
    assert cl.scheduling(definite.claim).scheduler.selected_node == ""
    transient = sagas.run_action("RecordFailure", c, CLASS, acme, inp, failure=sagas.Fail(reason="x"))
    assert isinstance(transient, sagas.Done) and transient.claim is not None
    assert cl.scheduling(transient.claim).driver.unsuitable_nodes == ()
    # a stale saga (scheduler moved to n2) must not undo the scheduler's new choice
    stale = sagas.run_action("RecordFailure", moved, CLASS, acme, inp, failure=sagas.Fail(reason="x"))
    assert stale == sagas.Done(note="the scheduler selected another node meanwhile: its choice stays")
    # the finalizer stays on an allocated claim even if a compensation asks
    alloc = cl.allocated(cl.with_finalizer(claim(), D), D, AllocationResult())
    assert sagas.run_action("RemoveFinalizer", alloc, CLASS, acme, inp).claim is None  # type: ignore[union-attr]


def test_undo_allocate_never_frees_a_recorded_allocation() -> None:
    """The allocation step's compensation runs only when that step failed, so a claim recorded as
    allocated was recorded by another saga (the plugin answers per claim uid: it is the same
    allocation): freeing it would pull the devices from under it."""
    acme = AcmeGpuController()
    inp = sagas.SagaInput(namespace="default", name="g", uid="uid-g", driver_name=D, selected_node="n1")
    acme.observe(AcmeGpuNodePlugin(node_name="n1", gpus=[GpuInfo(name="gpu-0", memory="4Gi")]).capacity())
    pending = cl.with_finalizer(cl.with_selected_node(claim(), "n1"), D)
    out = sagas.run_action("DriverAllocate", pending, CLASS, acme, inp)
    assert isinstance(out, sagas.Done) and out.claim is not None
    recorded = out.claim  # another saga wrote this
    assert sagas.run_action("UndoAllocate", recorded, CLASS, acme, inp) == sagas.Done(
        note="the claim is Allocated: another saga recorded the allocation, it stays"
    )
    assert str(acme.free_memory("n1")["gpu-0"]) == "2Gi", "the recorded allocation was freed"
    # nothing recorded: the driver frees what this step had it allocate
    assert sagas.run_action("UndoAllocate", pending, CLASS, acme, inp) == sagas.Done()
    assert str(acme.free_memory("n1")["gpu-0"]) == "4Gi"


def pod(uid: str = "uid-p") -> c1.Pod:
    from draflow.events.api.classic_pod import decode_manifest

    obj = decode_manifest(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "uid": uid},
            "spec": {
                "resourceClaims": [{"name": "gpu", "template": {"resourceClassName": "acme-gpu"}}],
                "containers": [{"name": "c", "image": "i", "resources": {"claims": ["gpu"]}}],
            },
        }
    )
    assert isinstance(obj, c1.Pod)
    return obj


def test_sync_pod_creates_owned_claims_and_refuses_foreign_ones() -> None:
    (create,) = sync_pod(pod(), {})
    assert isinstance(create, CreateClaim)
    made = create.claim
    assert made.metadata.name == "p-gpu" and made.metadata.owner_references[0].uid == "uid-p"
    assert sync_pod(pod(), {"p-gpu": made}) == []
    assert sync_pod(pod("uid-other"), {"p-gpu": made}) == [
        Blocked(reason="ResourceClaim p-gpu exists but was not created for pod p")
    ]
    assert sync_pod(pod(), {"p-gpu": made}, pod_gone=True) == [
        DeleteClaim(
            namespace="default", claim_name="p-gpu", claim_uid="", reason="owning pod default/p is gone"
        )
    ]
    assert sch.pre_filter(pod("uid-other"), {"p-gpu": made}) == sch.PreFilterResult(
        code=sch.UNSCHEDULABLE, reason="resourceclaim p-gpu was not created for pod p (pod is not owner)"
    )
    assert sch.pre_filter(pod(), {}).reason == "waiting for resourceclaim p-gpu"


def test_filter_uses_available_on_nodes_and_unsuitable_nodes() -> None:
    n1, n2 = (make_node(n) for n in ("n1", "n2"))
    pending = cl.with_unsuitable_nodes(claim(), ("n1",))
    state = sch.PreFilterResult(code=sch.OK, claims=(sch.ClaimInfo(pod_claim_name="gpu", claim=pending),))
    assert not sch.filter_node(state, n1).ok and sch.filter_node(state, n2).ok
    alloc = cl.allocated(claim(), D, AllocationResult(available_on_nodes=node_names_selector("n2")))
    state = sch.PreFilterResult(code=sch.OK, claims=(sch.ClaimInfo(pod_claim_name="gpu", claim=alloc),))
    assert sch.filter_node(state, n1) == sch.FilterResult(
        ok=False, reasons=("resourceclaim g not available on the node",), rejected_by_allocated=("g",)
    )
    assert sch.filter_node(state, n2).ok
    # PreScore publishes sorted potential nodes only when they changed; at most 128
    state = sch.PreFilterResult(code=sch.OK, claims=(sch.ClaimInfo(pod_claim_name="gpu", claim=claim()),))
    (upd,) = sch.pre_score(state, [f"n{i:03d}" for i in range(200, 0, -1)])
    assert cl.scheduling(upd).scheduler.potential_nodes == tuple(f"n{i:03d}" for i in range(1, 129))
    state = sch.PreFilterResult(code=sch.OK, claims=(sch.ClaimInfo(pod_claim_name="gpu", claim=upd),))
    assert sch.pre_score(state, [f"n{i:03d}" for i in range(1, 201)]) == []


def test_reserve_is_atomic_per_claim_version() -> None:
    """Two schedulers reserve the same userLimit-1 claim from the same version: only one write can
    win (optimistic concurrency); the loser reloads and is told the claim is in use."""
    alloc = cl.allocated(claim(), D, AllocationResult())
    p1, p2 = pod("uid-1"), pod("uid-2")
    w1, w2 = sch.reserve_claim(alloc, p1), sch.reserve_claim(alloc, p2)
    assert isinstance(w1, cv.ResourceClaim) and isinstance(w2, cv.ResourceClaim)
    stored: list[cv.ResourceClaim] = [alloc]  # the claim's versions, as the log keeps them

    def append(new: cv.ResourceClaim, based_on: int) -> bool:
        if based_on != len(stored):
            return False
        stored.append(new)
        return True

    assert append(w1, 1)
    assert not append(w2, 1)  # conflict: reload and decide again
    latest = stored[-1]
    assert sch.reserve_claim(latest, p2) == "resourceclaim g is in use by 1 (userLimit 1)"
    assert sch.reserve_claim(latest, p1) is latest  # already reserved: no write
    assert sch.unreserve([latest], p1)[0].status.reserved_for == ()


def test_reserve_selects_node_and_waits_for_delayed_claims() -> None:
    state = sch.PreFilterResult(code=sch.OK, claims=(sch.ClaimInfo(pod_claim_name="gpu", claim=claim()),))
    res = sch.reserve(state, pod(), "n1")
    assert res.code == sch.WAIT
    assert cl.scheduling(res.updates[0]).scheduler.selected_node == "n1"
    state = sch.PreFilterResult(
        code=sch.OK, claims=(sch.ClaimInfo(pod_claim_name="gpu", claim=res.updates[0]),)
    )
    assert sch.reserve(state, pod(), "n1").updates == ()  # already selected: no rewrite


def test_post_filter_skips_used_immediate_and_innocent_claims() -> None:
    alloc = cl.allocated(claim(), D, AllocationResult(available_on_nodes=node_names_selector("n2")))
    used = cl.reserved(alloc, OwnerReference(api_version="v1", kind="Pod", name="x", uid="x"))
    rejected = [sch.FilterResult(ok=False, rejected_by_allocated=("g",))]
    for c in (used, replace(alloc, spec=replace(alloc.spec, allocation_mode=cv.IMMEDIATE))):
        state = sch.PreFilterResult(code=sch.OK, claims=(sch.ClaimInfo(pod_claim_name="gpu", claim=c),))
        assert sch.post_filter(state, rejected).reallocate is None
    state = sch.PreFilterResult(code=sch.OK, claims=(sch.ClaimInfo(pod_claim_name="gpu", claim=alloc),))
    assert sch.post_filter(state, [sch.FilterResult(ok=False)]).reallocate is None
    chosen = sch.post_filter(state, rejected).reallocate
    assert chosen is not None and chosen.status.phase == cv.REALLOCATE
