"""The classic saga plans on the foundation's saga engine, against a real nats-server.

Claims and classes live in the log as the apiserver stores them (``...Applied`` events); the
sagas read them with the shared object fold and write lifecycle facts with optimistic concurrency.
"""

from __future__ import annotations

import msgspec

from events.api import classic_v1alpha1 as cv
from events.api.meta import ObjectMeta
from events.objects import object_applied, status_updated
from infra.eventstore import EventStore
from sagas.engine import SagaEngine, SagaStatus
from services.dra.classic import claims as cl
from services.dra.classic.plugin import Failure
from services.dra.classic.validation import admit_classic
from services.driver_controller.saga_wiring import SAGAS, ClassicSagaDeps
from services.driver_controller.sagas import CANCEL_REALLOCATION, Done, SagaInput, run_action
from services.driver_controller.store import EventClaimStore
from services.drivers.acme_gpu import AcmeGpuController, AcmeGpuNodePlugin, GpuInfo
from services.drivers.fpga_example import FpgaController
from services.drivers.fpga_example.controller import FABRIC_LABEL
from tests.classic.sim import node

D = "gpu.acme.com"


async def _put_class(store: EventStore, name: str, driver: str) -> None:
    rc = admit_classic(
        cv.ResourceClass(metadata=ObjectMeta(name=name, uid=f"uid-{name}"), driver_name=driver)
    )
    await store.append(store.subject(cv.CLASS_KIND, None, name), object_applied(rc), expected_last_seq=0)


async def _put_claim(
    store: EventStore, name: str, cls: str, params: object, selected: str = ""
) -> cv.ResourceClaim:
    claim = admit_classic(
        cv.ResourceClaim(
            metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"),
            spec=cv.ResourceClaimSpec(resource_class_name=cls, parameters=params),
        )
    )
    subject = store.subject(cv.CLAIM_KIND, "default", name)
    await store.append(subject, object_applied(claim), expected_last_seq=0)
    if selected:
        status = cl.with_selected_node(claim, selected).status
        await store.append(subject, status_updated(cv.CLAIM_KIND, status), expected_last_seq=None)
    return claim


def _input(name: str, driver: str, selected: str | None) -> SagaInput:
    return SagaInput(
        namespace="default", name=name, uid=f"uid-{name}", driver_name=driver, selected_node=selected
    )


async def test_allocation_failure_and_reallocation_on_the_engine(event_store: EventStore) -> None:
    acme = AcmeGpuController()
    acme.observe(AcmeGpuNodePlugin(node_name="n1", gpus=[GpuInfo(name="gpu-0", memory="4Gi")]).capacity())
    claims = EventClaimStore(event_store)
    engine = SagaEngine(
        event_store, SAGAS, deps=ClassicSagaDeps({D: acme}, claims), retry_initial_s=0.01, retry_attempts=3
    )
    await _put_class(event_store, "acme-gpu", D)

    await _put_claim(event_store, "ok", "acme-gpu", {"memory": "2Gi"}, selected="n1")
    state = await engine.start("ClassicAllocation", "alloc-ok", _input("ok", D, "n1"))
    assert state.status == SagaStatus.COMPLETED
    claim, _ = await claims.load("default", "ok")
    assert claim is not None and claim.status.phase == cv.ALLOCATED
    assert claim.status.attributes == {"node": "n1", "gpu": "gpu-0", "memory": "2Gi"}
    assert claim.metadata.finalizers == ("gpu.acme.com/deletion-protection",)
    assert cl.scheduling(claim).scheduler == cv.SchedulerSchedulingStatus()

    # a node without ACME GPUs: definite failure, compensated, node marked unsuitable
    await _put_claim(event_store, "bad", "acme-gpu", {"memory": "2Gi"}, selected="n9")
    state = await engine.start("ClassicAllocation", "alloc-bad", _input("bad", D, "n9"))
    assert state.status == SagaStatus.COMPENSATED
    assert "node n9 has no ACME GPUs" in state.error
    bad, _ = await claims.load("default", "bad")
    assert bad is not None and bad.status.phase == cv.PENDING
    assert bad.metadata.finalizers == ()
    assert cl.scheduling(bad).scheduler.selected_node == ""
    assert cl.scheduling(bad).driver.unsuitable_nodes == ("n9",)

    # Reallocate: the driver frees, the claim is Pending again and loses the finalizer
    subject = event_store.subject(cv.CLAIM_KIND, "default", "ok")
    await event_store.append(
        subject, status_updated(cv.CLAIM_KIND, cl.reallocate(claim).status), expected_last_seq=None
    )
    state = await engine.start("ClassicReallocation", "realloc-ok", _input("ok", D, None))
    assert state.status == SagaStatus.COMPLETED
    freed, _ = await claims.load("default", "ok")
    assert freed is not None and freed.status.phase == cv.PENDING and freed.status.attributes == {}
    assert freed.metadata.finalizers == ()
    assert str(acme.free_memory("n1")["gpu-0"]) == "4Gi"
    # a repeated saga id does not run twice
    again = await engine.start("ClassicReallocation", "realloc-ok", _input("ok", D, None))
    assert again.status == SagaStatus.COMPLETED


async def test_fpga_programming_is_retried_by_the_engine(event_store: EventStore) -> None:
    fpga = FpgaController(programming_steps=2)
    fpga.observe(node("n1", **{FABRIC_LABEL: "true"}))
    claims = EventClaimStore(event_store)
    engine = SagaEngine(
        event_store,
        SAGAS, deps=ClassicSagaDeps({"fpga.example.com": fpga}, claims),
        retry_initial_s=0.01,
        retry_attempts=4,
    )
    await _put_class(event_store, "fpga", "fpga.example.com")
    await _put_claim(event_store, "aes", "fpga", {"bitstream": "/a.bit"})
    state = await engine.start("ClassicAllocation", "alloc-aes", _input("aes", "fpga.example.com", None))
    assert state.status == SagaStatus.COMPLETED
    stored, _ = await claims.load("default", "aes")
    assert stored is not None and stored.status.attributes["fpga"] == "fpga-0"
    steps = [e.data for e in await event_store.events(engine.subject("alloc-aes"))]
    failed = [type(e).__name__ for e in steps if "Failed" in type(e).__name__]
    assert failed == []  # InProgress answers were retries inside the step, not failures


class _StuckAcme(AcmeGpuController):
    """An ACME driver whose hardware refuses to be freed (a definite deallocation failure)."""

    def deallocate(self, claim: cv.ResourceClaim) -> Failure:
        return Failure(reason="GPU is wedged", definite=True)


async def test_reallocation_that_cannot_free_is_compensated(event_store: EventStore) -> None:
    """The driver cannot free: the reallocation saga compensates its check step, so the claim is
    Allocated again (not stuck in Reallocate) and keeps its finalizer; running the compensation
    again (a resumed saga) changes nothing."""
    acme = _StuckAcme()
    acme.observe(AcmeGpuNodePlugin(node_name="n1", gpus=[GpuInfo(name="gpu-0", memory="4Gi")]).capacity())
    claims = EventClaimStore(event_store)
    engine = SagaEngine(
        event_store, SAGAS, deps=ClassicSagaDeps({D: acme}, claims), retry_initial_s=0.01, retry_attempts=2
    )
    await _put_class(event_store, "acme-gpu", D)
    await _put_claim(event_store, "g", "acme-gpu", {"memory": "2Gi"}, selected="n1")
    assert (
        await engine.start("ClassicAllocation", "alloc-g", _input("g", D, "n1"))
    ).status == SagaStatus.COMPLETED
    claim, _ = await claims.load("default", "g")
    assert claim is not None
    subject = event_store.subject(cv.CLAIM_KIND, "default", "g")
    await event_store.append(
        subject, status_updated(cv.CLAIM_KIND, cl.reallocate(claim).status), expected_last_seq=None
    )

    state = await engine.start("ClassicReallocation", "realloc-g", _input("g", D, None))
    assert state.status == SagaStatus.COMPENSATED
    assert "GPU is wedged" in state.error
    after, _ = await claims.load("default", "g")
    assert after is not None and after.status.phase == cv.ALLOCATED
    assert after.status.attributes == claim.status.attributes
    assert after.metadata.finalizers == ("gpu.acme.com/deletion-protection",)
    kinds = [type(e.data).__name__ for e in await event_store.events(engine.subject("realloc-g"))]
    # the compensation was owed (recorded) before the check step ran
    assert kinds.index("SagaStepStarted") < kinds.index("SagaStepCompensated")

    again = run_action(
        CANCEL_REALLOCATION, after, None, acme, msgspec.convert(_input("g", D, None), SagaInput)
    )
    assert isinstance(again, Done) and again.claim is None
