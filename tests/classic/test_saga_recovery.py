"""The classic driver-controller sagas when things go wrong: conflicts, compensations, crashes.

On a real nats-server, with the sagas as the service wires them (``SAGAS`` with ``ClassicSagaDeps`` over the
event-sourced claim store). A saga is stopped dead right after one of its appends landed (its task
cancelled, its connection closed: the log as a killed process leaves it) and a new
:class:`DriverControllerService` — its own connection and log-fed cache, its plugins primed from
the log as at start-up — resumes it. The log is what is checked: the saga's writes are the events
that carry its id as correlation id.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from events.api import classic_v1alpha1 as cv
from events.api.meta import ObjectMeta
from events.envelope import Envelope, Event
from events.objects import object_applied, status_updated
from events.saga import SagaStepCompleted, SagaStepFailed
from infra.config import Settings
from infra.eventstore import EventStore
from sagas.engine import SagaEngine, SagaStatus
from services.dra.classic import claims as cl
from services.dra.classic.plugin import ControllerPlugin
from services.dra.classic.validation import admit_classic
from services.driver_controller.saga_wiring import SAGAS, ClassicSagaDeps
from services.driver_controller.sagas import SagaInput
from services.driver_controller.service import DriverControllerService
from services.driver_controller.store import EventClaimStore
from services.drivers.acme_gpu import AcmeGpuController, AcmeGpuNodePlugin, GpuInfo
from services.drivers.fpga_example import FpgaController
from services.drivers.fpga_example.controller import FABRIC_LABEL
from services.runtime.controller import Runtime
from tests.classic.sim import node
from tests.scheduler_service.interrupt import BeforeAppend, StopAfterAppend

FPGA = "fpga.example.com"
ACME = "gpu.acme.com"
FINALIZERS = "ClassicResourceClaimFinalizersChanged"
STATUS = "ClassicResourceClaimStatusUpdated"


class Harness:
    """Connections of the 'processes' a test runs (closed at the end), and the log's view."""

    def __init__(self, store: EventStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.stores: list[EventStore] = []
        self.runtimes: list[Runtime] = []

    async def connect(self, actor: str) -> EventStore:
        store = await EventStore.open(self.settings, actor)
        self.stores.append(store)
        return store

    def engine(self, store: EventStore, plugin: ControllerPlugin, attempts: int = 5) -> SagaEngine:
        deps = ClassicSagaDeps({plugin.driver_name: plugin}, EventClaimStore(store))
        return SagaEngine(store, SAGAS, deps=deps, retry_attempts=attempts, retry_initial_s=0.01)

    async def restarted(self, actor: str, plugin: ControllerPlugin) -> DriverControllerService:
        """A new driver-controller: cache from the log, plugins primed, unfinished sagas resumed."""
        rt = Runtime(await self.connect(actor), actor=actor)
        self.runtimes.append(rt)
        await rt.start()
        service = DriverControllerService(rt, {plugin.driver_name: plugin}, retry_initial_s=0.01)
        service.prime()
        await service.resume()
        return service

    def subject(self, name: str) -> str:
        return self.store.subject(cv.CLAIM_KIND, "default", name)

    async def claim(self, name: str) -> cv.ResourceClaim:
        claim, _ = await EventClaimStore(self.store).load("default", name)
        assert claim is not None
        return claim

    async def writes(self, name: str, sid: str) -> list[Envelope[Event]]:
        return [e for e in await self.store.events(self.subject(name)) if e.correlation_id == sid]

    async def trail(self, sid: str) -> list[Envelope[Event]]:
        return await self.store.events(self.store.subject("Saga", None, sid))

    async def put(self, *objs: Any) -> None:
        for obj in objs:
            kind = type(obj).KIND
            subject = self.store.subject(kind, obj.metadata.namespace or None, obj.metadata.name)
            await self.store.append(subject, object_applied(obj), expected_last_seq=0)

    async def select(self, name: str, node_name: str) -> None:
        """The scheduler picks a node for a delayed claim (its status write)."""
        claim = await self.claim(name)
        status = cl.with_selected_node(claim, node_name).status
        await self.store.append(
            self.subject(name), status_updated(cv.CLAIM_KIND, status), expected_last_seq=None
        )


@pytest.fixture
async def harness(event_store: EventStore, settings: Settings) -> AsyncIterator[Harness]:
    h = Harness(event_store, settings)
    try:
        yield h
    finally:
        for rt in h.runtimes:
            await rt.stop()
        for store in h.stores:
            await store.close()


def _class(name: str, driver: str) -> cv.ResourceClass:
    return admit_classic(
        cv.ResourceClass(metadata=ObjectMeta(name=name, uid=f"uid-{name}"), driver_name=driver)
    )


def _claim(name: str, cls: str, params: object) -> cv.ResourceClaim:
    return admit_classic(
        cv.ResourceClaim(
            metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"),
            spec=cv.ResourceClaimSpec(resource_class_name=cls, parameters=params),
        )
    )


def _input(name: str, driver: str, selected: str | None = None) -> SagaInput:
    return SagaInput(
        namespace="default", name=name, uid=f"uid-{name}", driver_name=driver, selected_node=selected
    )


def _on(name: str, check: Callable[[Event], bool]) -> Callable[[str, Sequence[Event]], bool]:
    return lambda subject, events: subject.endswith(f".{name}") and any(check(e) for e in events)


def _finalizers(e: Event) -> tuple[str, ...] | None:
    return getattr(e, "finalizers", None) if type(e).type_name() == FINALIZERS else None


def _status(e: Event) -> cv.ResourceClaimStatus | None:
    return getattr(e, "status", None) if type(e).type_name() == STATUS else None


async def _stop_dead(task: asyncio.Task[Any], store: EventStore) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await store.close()


# ---- ClassicAllocation -----------------------------------------------------------------------------

PARAMS = {"bitstream": "/images/aes.xclbin", "memory": "8Gi"}


async def _fpga_cluster(h: Harness, plugin: FpgaController) -> str:
    """Node n1 on the fabric, class ``fpga``; claim ``z`` allocated by a saga of its own (fpga-0);
    claim ``g`` pending with n1 selected. Returns z's saga id."""
    n1 = node("n1", **{FABRIC_LABEL: "true"})
    await h.put(n1, _class("fpga", FPGA), _claim("z", "fpga", PARAMS), _claim("g", "fpga", PARAMS))
    plugin.observe(n1)
    z_sid = "ClassicAllocation-uid-z-1"
    state = await h.engine(h.store, plugin).start("ClassicAllocation", z_sid, _input("z", FPGA))
    assert state.status is SagaStatus.COMPLETED, state
    assert (await h.claim("z")).status.attributes["fpga"] == "fpga-0"
    await h.select("g", "n1")
    return z_sid


async def _z_untouched(h: Harness, z_sid: str, before: list[Envelope[Event]]) -> None:
    assert await h.store.events(h.subject("z")) == before, "another saga's claim changed"
    z = await h.claim("z")
    assert cl.phase(z) == cv.ALLOCATED and z.metadata.finalizers == (f"{FPGA}/deletion-protection",)
    assert {e.correlation_id for e in before if e.type != "ClassicResourceClaimApplied"} == {z_sid}


async def test_allocation_gave_up_undoes_its_own_writes_in_reverse(harness: Harness) -> None:
    """The FPGA never finishes programming (transient answers past the retries): the saga undoes
    the driver's programming, then its finalizer (step 1), then frees the selected node (step 0),
    in that order, and leaves claim ``z`` (another saga's) alone."""
    h = harness
    plugin = FpgaController(programming_steps=99)
    z_sid = await _fpga_cluster(h, FpgaController(programming_steps=0))
    plugin.observe(node("n1", **{FABRIC_LABEL: "true"}))
    plugin.observe(await h.claim("z"))
    z_before = await h.store.events(h.subject("z"))
    sid = "ClassicAllocation-uid-g-9"
    state = await h.engine(h.store, plugin, attempts=2).start(
        "ClassicAllocation", sid, _input("g", FPGA, "n1")
    )
    assert state.status is SagaStatus.COMPENSATED, state
    assert "allocate-and-record: gave up after 2 attempts: TransientError: programming" in state.error

    trail = await h.trail(sid)
    assert [(e.type, getattr(e.data, "index", None)) for e in trail] == [
        ("SagaStarted", None),
        ("SagaStepStarted", 0),
        ("SagaStepCompleted", 0),
        ("SagaStepStarted", 1),
        ("SagaStepCompleted", 1),
        ("SagaStepStarted", 2),
        ("SagaStepFailed", 2),
        ("SagaStepCompensated", 2),  # the driver freed what it was programming (no write)
        ("SagaStepCompensated", 1),
        ("SagaStepCompensated", 0),
        ("SagaCompensated", None),
    ]
    mine = await h.writes("g", sid)
    assert [e.type for e in mine] == [FINALIZERS, FINALIZERS, STATUS]
    assert [_finalizers(e.data) for e in mine[:2]] == [(f"{FPGA}/deletion-protection",), ()]
    cleared = _status(mine[2].data)
    assert cleared is not None and (cleared.scheduling or cv.SchedulingStatus()).scheduler.selected_node == ""
    # each undo lands between the failure and its own SagaStepCompensated, step 1's before step 0's
    seq = {(e.type, getattr(e.data, "index", None)): e.seq for e in trail}
    assert seq[("SagaStepFailed", 2)] < mine[1].seq < seq[("SagaStepCompensated", 1)]
    assert seq[("SagaStepCompensated", 1)] < mine[2].seq < seq[("SagaStepCompensated", 0)]
    g = await h.claim("g")
    assert cl.phase(g) == cv.PENDING and g.metadata.finalizers == ()
    assert plugin.free_fpgas() == ["fpga-1", "fpga-2"]  # g's FPGA is free again, z's is not
    await _z_untouched(h, z_sid, z_before)


async def test_allocation_stopped_inside_its_compensation_is_finished_by_the_next_instance(
    harness: Harness,
) -> None:
    h = harness
    z_sid = await _fpga_cluster(h, FpgaController(programming_steps=0))
    z_before = await h.store.events(h.subject("z"))
    first = await h.connect("driver-controller-a")
    plugin = FpgaController(programming_steps=99)
    plugin.observe(node("n1", **{FABRIC_LABEL: "true"}))
    plugin.observe(await h.claim("z"))
    stop = StopAfterAppend(first, _on("g", lambda e: _finalizers(e) == ()))  # step 1's undo landed
    sid = "ClassicAllocation-uid-g-9"
    engine = h.engine(first, plugin, attempts=2)
    task = asyncio.create_task(engine.start("ClassicAllocation", sid, _input("g", FPGA, "n1")))
    await asyncio.wait_for(stop.landed.wait(), 10)
    await _stop_dead(task, first)
    assert (await h.trail(sid))[-1].type == "SagaStepCompensated"  # step 2's; step 1's not recorded

    service = await h.restarted("driver-controller-b", FpgaController(programming_steps=0))
    state = await service.engine.load(sid)
    assert state is not None and state.status is SagaStatus.COMPENSATED, state
    mine = await h.writes("g", sid)
    assert [e.type for e in mine] == [FINALIZERS, FINALIZERS, STATUS]  # the finalizer removed once
    resumed = (await h.trail(sid))[-3:]
    assert [(e.type, getattr(e.data, "index", None), e.actor) for e in resumed] == [
        ("SagaStepCompensated", 1, "driver-controller-b"),
        ("SagaStepCompensated", 0, "driver-controller-b"),
        ("SagaCompensated", None, "driver-controller-b"),
    ]
    assert mine[2].actor == "driver-controller-b"
    await _z_untouched(h, z_sid, z_before)


async def test_a_write_between_the_steps_read_and_its_append_is_retried(harness: Harness) -> None:
    """The scheduler publishes potential nodes while the driver allocates: the allocation's write
    is refused at the version read, the engine retries the step, which reads the claim again and
    writes the (same, idempotent) allocation on top."""
    h = harness
    plugin = FpgaController(programming_steps=0)
    await _fpga_cluster(h, plugin)

    async def potential_nodes() -> None:
        g = await h.claim("g")
        status = cl.with_potential_nodes(g, ("n1", "n2")).status
        await h.store.append(
            h.subject("g"),
            status_updated(cv.CLAIM_KIND, status),
            expected_last_seq=None,
            correlation_id="sched",
        )

    allocated = _on("g", lambda e: (s := _status(e)) is not None and s.phase == cv.ALLOCATED)
    first = await h.connect("driver-controller-a")
    injected = BeforeAppend(first, allocated, potential_nodes)
    sid = "ClassicAllocation-uid-g-9"
    state = await h.engine(first, plugin).start("ClassicAllocation", sid, _input("g", FPGA, "n1"))
    assert injected.done
    assert state.status is SagaStatus.COMPLETED, state
    assert not [e for e in await h.trail(sid) if isinstance(e.data, SagaStepFailed)]
    history = await h.store.events(h.subject("g"))
    assert [(e.type, e.correlation_id) for e in history[-2:]] == [(STATUS, "sched"), (STATUS, sid)]
    assert history[-1].id == f"saga:{sid}:2:do:{STATUS}"
    g = await h.claim("g")
    assert cl.phase(g) == cv.ALLOCATED and g.status.attributes["fpga"] == "fpga-1"
    assert [e.type for e in await h.writes("g", sid)] == [FINALIZERS, STATUS]


# ---- ClassicReallocation ---------------------------------------------------------------------------


async def _acme_allocated(h: Harness, plugin: AcmeGpuController) -> None:
    """Claim ``r`` allocated on n1 (2Gi of gpu-0's 4Gi), then asked to Reallocate (no users)."""
    capacity = AcmeGpuNodePlugin(node_name="n1", gpus=[GpuInfo(name="gpu-0", memory="4Gi")]).capacity()
    await h.put(capacity, _class("acme", ACME), _claim("r", "acme", {"memory": "2Gi"}))
    plugin.observe(capacity)
    await h.select("r", "n1")
    state = await h.engine(h.store, plugin).start("ClassicAllocation", "alloc-r", _input("r", ACME, "n1"))
    assert state.status is SagaStatus.COMPLETED, state
    r = await h.claim("r")
    await h.store.append(
        h.subject("r"), status_updated(cv.CLAIM_KIND, cl.reallocate(r).status), expected_last_seq=None
    )


@pytest.mark.parametrize(
    ("where", "stop_at"),
    [
        # the driver freed the claim and that step is recorded; Pending is not written yet
        pytest.param(
            "after-free",
            lambda subject, events: (
                ".Saga." in subject
                and any(isinstance(e, SagaStepCompleted) and e.step == "driver-deallocate" for e in events)
            ),
            id="after-free",
        ),
        # Pending written, the step's completion not recorded
        pytest.param(
            "pending-written",
            _on("r", lambda e: (s := _status(e)) is not None and s.phase == cv.PENDING),
            id="pending-written",
        ),
    ],
)
async def test_reallocation_stopped_midway_is_finished_and_frees_the_device(
    harness: Harness, where: str, stop_at: Callable[[str, Sequence[Event]], bool]
) -> None:
    """The next instance rebuilds its driver's books from the log, where ``r`` still looks
    allocated when the stop came before Pending was written; the resumed saga must leave the
    device free in those books too, not only in the killed process's."""
    h = harness
    await _acme_allocated(h, AcmeGpuController())
    first = await h.connect("driver-controller-a")
    plugin = AcmeGpuController()
    plugin.observe(AcmeGpuNodePlugin(node_name="n1", gpus=[GpuInfo(name="gpu-0", memory="4Gi")]).capacity())
    plugin.observe(await h.claim("r"))
    assert str(plugin.free_memory("n1")["gpu-0"]) == "2Gi"
    stop = StopAfterAppend(first, stop_at)
    sid = "ClassicReallocation-uid-r-7"
    task = asyncio.create_task(h.engine(first, plugin).start("ClassicReallocation", sid, _input("r", ACME)))
    await asyncio.wait_for(stop.landed.wait(), 10)
    await _stop_dead(task, first)
    assert str(plugin.free_memory("n1")["gpu-0"]) == "4Gi"  # freed in the stopped process

    books = AcmeGpuController()
    service = await h.restarted("driver-controller-b", books)
    state = await service.engine.load(sid)
    assert state is not None and state.status is SagaStatus.COMPLETED, state
    mine = await h.writes("r", sid)
    assert [e.type for e in mine] == [STATUS, FINALIZERS]  # Pending once, the finalizer removed once
    r = await h.claim("r")
    assert cl.phase(r) == cv.PENDING and r.metadata.finalizers == () and r.status.attributes == {}
    assert str(books.free_memory("n1")["gpu-0"]) == "4Gi", "the resumed instance still holds the GPU"
