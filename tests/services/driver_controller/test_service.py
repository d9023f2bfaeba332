"""The driver-controller service against a real nats-server: the log in, sagas and facts out.

The scheduler's part (potential / selected node) is played by appending the status it would
write; everything else is the service's own pass (``sync``) over its cache of the log.
"""

from __future__ import annotations

from typing import Any

import pytest
from msgspec.structs import replace

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import core_v1 as c1
from draflow.events.api.classic_pod import decode_manifest
from draflow.events.api.loader import parse_documents
from draflow.events.api.meta import ObjectMeta
from draflow.events.objects import object_applied, object_deleted, status_updated
from draflow.infra.eventstore import ConcurrencyError, EventStore
from draflow.services.dra.classic import claims as cl
from draflow.services.dra.classic.validation import admit_classic
from draflow.services.driver_controller.service import DriverControllerService
from draflow.services.drivers.acme_gpu import AcmeGpuController, AcmeGpuNodePlugin, GpuInfo
from draflow.services.drivers.fpga_example import FpgaController
from draflow.services.drivers.fpga_example.controller import FABRIC_LABEL
from draflow.services.runtime.controller import Runtime
from tests.builders import make_node
from tests.paths import ROOT

pytestmark = pytest.mark.kep3063

EXAMPLES = ROOT / "examples" / "classic"
CLAIM = cv.CLAIM_KIND


async def put(store: EventStore, obj: Any) -> None:
    meta = obj.metadata
    await store.append(
        store.subject(obj.KIND, meta.namespace or None, meta.name),
        object_applied(obj),
        expected_last_seq=None,
    )


async def settle(rt: Runtime, svc: DriverControllerService, passes: int = 1) -> None:
    for _ in range(passes):
        await rt.cache.wait_position(await rt.events.stream_last_seq())
        await svc.sync()
        await svc.wait_idle()
    await rt.cache.wait_position(await rt.events.stream_last_seq())


def claim_of(rt: Runtime, name: str) -> cv.ResourceClaim | None:
    return rt.get(CLAIM, "default", name)


async def scheduler_writes(rt: Runtime, name: str, **change: Any) -> None:
    claim = claim_of(rt, name)
    assert claim is not None
    new = claim
    if "potential" in change:
        new = cl.with_potential_nodes(new, change["potential"])
    if "selected" in change:
        new = cl.with_selected_node(new, change["selected"])
    assert await rt.append(CLAIM, "default", name, [status_updated(CLAIM, new.status)])


async def test_immediate_fpga_claim_is_allocated_by_the_service(runtime: Runtime) -> None:
    fpga = FpgaController(programming_steps=2)
    svc = DriverControllerService(runtime, {"fpga.example.com": fpga}, retry_initial_s=0.01)
    store = runtime.events
    await put(store, make_node("n1", labels={FABRIC_LABEL: "true"}))
    await put(
        store,
        admit_classic(
            cv.ResourceClass(metadata=ObjectMeta(name="fpga", uid="u-c"), driver_name="fpga.example.com")
        ),
    )
    spec = cv.ResourceClaimSpec(
        resource_class_name="fpga", allocation_mode=cv.IMMEDIATE, parameters={"bitstream": "/a.bit"}
    )
    await put(
        store,
        admit_classic(
            cv.ResourceClaim(metadata=ObjectMeta(name="aes", namespace="default", uid="u-aes"), spec=spec)
        ),
    )
    await settle(runtime, svc)
    claim = claim_of(runtime, "aes")
    assert claim is not None and claim.metadata.finalizers == ("fpga.example.com/deletion-protection",)
    await settle(runtime, svc)
    claim = claim_of(runtime, "aes")
    assert claim is not None and claim.status.phase == cv.ALLOCATED
    assert claim.status.attributes["fpga"] == "fpga-0"


async def acme_pod_and_its_claim(runtime: Runtime) -> tuple[AcmeGpuController, DriverControllerService]:
    """An acme GPU node (n1; n2 has none), the KEP-3063 device-consumer Pod and the claim the
    service creates for it."""
    acme = AcmeGpuController()
    svc = DriverControllerService(runtime, {"gpu.acme.com": acme}, retry_initial_s=0.01)
    store = runtime.events
    # the node side publishes the driver-owned capacity object through the log
    capacity = AcmeGpuNodePlugin(node_name="n1", gpus=[GpuInfo(name="gpu-0", memory="8Gi")]).capacity()
    await put(store, admit_classic(capacity))
    for name in ("n1", "n2"):
        await put(store, make_node(name))
    ((_, rc),) = parse_documents((EXAMPLES / "acme-gpu-resourceclass.yaml").read_text())
    await put(
        store, admit_classic(replace(decode_manifest(rc), metadata=ObjectMeta(name="acme-gpu", uid="u-c")))
    )
    ((_, raw),) = parse_documents((EXAMPLES / "device-consumer-pod.yaml").read_text())
    pod = decode_manifest(raw)
    assert isinstance(pod, c1.Pod)
    pod = replace(pod, metadata=replace(pod.metadata, namespace="default", uid="uid-dc"))
    await put(store, pod)

    await settle(runtime, svc)  # the classic claim controller creates device-consumer-gpu
    return acme, svc


async def test_kep_pod_claim_is_created_negotiated_allocated_and_torn_down(runtime: Runtime) -> None:
    acme, svc = await acme_pod_and_its_claim(runtime)
    store = runtime.events
    claim = claim_of(runtime, "device-consumer-gpu")
    assert claim is not None and claim.metadata.owner_references[0].uid == "uid-dc"
    assert claim.spec.allocation_mode == cv.DELAYED and claim.status.user_limit == 1

    await scheduler_writes(runtime, "device-consumer-gpu", potential=("n1", "n2"))
    await settle(runtime, svc)
    claim = claim_of(runtime, "device-consumer-gpu")
    assert claim is not None and cl.scheduling(claim).driver.unsuitable_nodes == ("n2",)
    assert cl.driver_answered(claim)  # the list it answers is recorded with the answer
    # a restarted controller (nothing in memory) reads the answer from the claim: no second one
    version = claim.metadata.resource_version
    svc = DriverControllerService(runtime, {"gpu.acme.com": acme}, retry_initial_s=0.01)
    await settle(runtime, svc)
    claim = claim_of(runtime, "device-consumer-gpu")
    assert claim is not None and claim.metadata.resource_version == version

    await scheduler_writes(runtime, "device-consumer-gpu", selected="n1")
    await settle(runtime, svc, passes=2)  # finalizer, then the allocation saga
    claim = claim_of(runtime, "device-consumer-gpu")
    assert claim is not None and claim.status.phase == cv.ALLOCATED
    assert claim.status.attributes == {
        "node": "n1",
        "gpu": "gpu-0",
        "memory": "2Gi",
        "initCommand": '["/usr/local/bin/acme-gpu-init", "--cluster", "my-cluster"]',
    }

    # the pod is gone: its claim is deleted, freed by the teardown saga, then removed
    await store.append(
        store.subject("Pod", "default", "device-consumer"), object_deleted("Pod"), expected_last_seq=None
    )
    await settle(runtime, svc, passes=4)
    assert claim_of(runtime, "device-consumer-gpu") is None
    assert str(acme.free_memory("n1")["gpu-0"]) == "8Gi"


async def test_an_answer_lost_to_a_conflict_is_given_again_by_the_next_pass(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unsuitable-nodes answer is appended at the claim's version; when another writer got
    there first the append is refused, nothing of it is remembered, and the next pass answers
    the same list again."""
    _, svc = await acme_pod_and_its_claim(runtime)
    await scheduler_writes(runtime, "device-consumer-gpu", potential=("n1", "n2"))
    cache = runtime.cache
    append = cache.append
    outcomes: list[bool] = []

    async def another_writer_first(kind: str, namespace: str, name: str, events: Any, **kw: Any) -> int:
        """The service's append at the version it decided on, after the scheduler rewrote the
        claim's status (the first time only)."""
        version = cache.index.version(kind, namespace, name)
        if kind == CLAIM and not outcomes:
            current = claim_of(runtime, name)
            assert current is not None
            subject = runtime.events.subject(CLAIM, namespace, name)
            await runtime.events.append(
                subject, status_updated(CLAIM, current.status), expected_last_seq=None
            )
        try:
            seq = await append(kind, namespace, name, events, **{"expected_last_seq": version, **kw})
        except ConcurrencyError:
            outcomes.append(False)
            raise
        outcomes.append(True)
        return seq

    monkeypatch.setattr(cache, "append", another_writer_first)
    await settle(runtime, svc)
    assert outcomes == [False]  # lost to the other write
    claim = claim_of(runtime, "device-consumer-gpu")
    assert claim is not None and not cl.driver_answered(claim)
    await settle(runtime, svc)
    assert outcomes == [False, True]
    claim = claim_of(runtime, "device-consumer-gpu")
    assert claim is not None and cl.driver_answered(claim)
    assert cl.scheduling(claim).driver.unsuitable_nodes == ("n2",)


async def test_a_claim_waiting_for_a_free_fpga_gets_it_after_the_other_is_deleted(runtime: Runtime) -> None:
    from draflow.events.objects import deletion_requested

    fpga = FpgaController(pool=[{"name": "fpga-0"}], programming_steps=0)
    svc = DriverControllerService(runtime, {"fpga.example.com": fpga}, retry_initial_s=0.01, retry_attempts=2)
    store = runtime.events
    await put(store, make_node("n1", labels={FABRIC_LABEL: "true"}))
    await put(
        store,
        admit_classic(
            cv.ResourceClass(metadata=ObjectMeta(name="fpga", uid="u-c"), driver_name="fpga.example.com")
        ),
    )
    spec = cv.ResourceClaimSpec(
        resource_class_name="fpga", allocation_mode=cv.IMMEDIATE, parameters={"bitstream": "/a.bit"}
    )
    for name in ("a", "b"):
        await put(
            store,
            admit_classic(
                cv.ResourceClaim(
                    metadata=ObjectMeta(name=name, namespace="default", uid=f"u-{name}"), spec=spec
                )
            ),
        )
    await settle(runtime, svc, passes=3)
    # Both claims' allocation sagas run concurrently and race for the one FPGA: either may win
    # (the classic controller promises no order between equal claims), exactly one does.
    phases = {n: c.status.phase for n in ("a", "b") if (c := claim_of(runtime, n)) is not None}
    assert sorted(phases.values()) == [cv.ALLOCATED, cv.PENDING], phases
    winner = next(n for n, phase in phases.items() if phase == cv.ALLOCATED)
    loser = "b" if winner == "a" else "a"
    assert any(f"ClassicAllocation-u-{loser}" in sid for sid in svc.attempts)  # its failed attempt counted

    subject = store.subject(CLAIM, "default", winner)
    await store.append(subject, deletion_requested(CLAIM, "2026-01-01T00:00:00Z"), expected_last_seq=None)
    await settle(runtime, svc, passes=5)
    assert claim_of(runtime, winner) is None
    waiting = claim_of(runtime, loser)
    assert waiting is not None and waiting.status.phase == cv.ALLOCATED
    assert waiting.status.attributes["fpga"] == "fpga-0"
