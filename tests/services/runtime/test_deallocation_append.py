"""Deallocations are one single append: ``ClaimDeallocated`` with the last reservations in its
``released``, and no guard message (the scheduler's snapshot counts a take as given back once it
saw the take's allocation, ``guard_heads``): the claim controller's writes through the object
cache, and a kubelet's that the apiserver appends after NodeRestriction admitted them. Logs
written before carried ``ClaimReservationsReleased`` + ``ClaimDeallocated`` + ``GuardReleased``
in one atomic batch, a file store of its own on the server."""

from __future__ import annotations

import msgspec

from draflow.events.api.resource_v1 import (
    Counter,
    CounterSet,
    Device,
    DeviceCounterConsumption,
)
from draflow.events.dra import DELETE_PROTECTION_FINALIZER, ClaimDeallocated, ClaimReservationsReleased
from draflow.events.envelope import Envelope, Event
from draflow.events.guard import GuardReleased
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.apiserver.server import ApiServer
from draflow.services.claim_controller.service import ClaimControllerService
from draflow.services.dra.claimactions import release_reservations
from draflow.services.runtime.claimwrites import execute
from draflow.services.runtime.controller import Runtime
from tests.builders import exact, make_claim, make_class, make_node, make_pod, make_slice
from tests.services.test_shells import kubelet_builder, register_node, template_pod_running
from tests.shells import eventually, run, schedule, start_runtime


def _guards(log: list[Envelope[Event]], root: str) -> list[tuple[str, str, str]]:
    """(scope, key, type) of the guard messages in ``log``."""
    out = []
    for e in log:
        parts = e.subject.split(".")
        if parts[:3] == [root, "ev", "Guard"]:
            out.append((parts[3], parts[4].replace("~", "."), e.type))
    return out


async def test_object_cache_deallocation_is_one_event_and_no_guard_message(
    runtime: Runtime, apiserver: ApiServer, event_store: EventStore
) -> None:
    """A partition consuming a counter set (two guards taken): the claim controller's actions
    (drop the last reservation, deallocate, drop the finalizer) are one ``ClaimDeallocated``
    naming the pod in ``released``, a single message; the guards get nothing."""
    rt, store = runtime, event_store
    part = Device(
        name="gpu-0-half",
        consumes_counters=(
            DeviceCounterConsumption(counter_set="gpu-0", counters={"mem": Counter(value="1")}),
        ),
    )
    counters = (CounterSet(name="gpu-0", counters={"mem": Counter(value="2")}),)
    devices = make_slice("node-1", [part], count=2)
    shared = make_slice("node-1", [], count=2, name="node-1-counters")
    shared = msgspec.structs.replace(
        shared, spec=msgspec.structs.replace(shared.spec, shared_counters=counters)
    )
    for obj in (
        make_class("gpu"),
        make_node("node-1"),
        shared,
        devices,
        make_pod("p", claims={"gpu": "c"}),
        make_claim("c", exact()),
    ):
        assert await rt.apply(obj)
    await eventually(lambda: rt.get("Pod", "default", "p"), what="pod in the cache")
    await schedule(rt, "default", "p", "node-1", {"c": [("gpu", "gpu-0-half")]})
    uid = rt.get("Pod", "default", "p").metadata.uid
    before = _guards(await store.events(f"{store.root}.ev.>"), store.root)
    claim = rt.get("ResourceClaim", "default", "c")
    await execute(rt, release_reservations(claim, [uid]))
    log = await store.events(f"{store.root}.ev.>")
    assert _guards(log, store.root) == before  # nothing on the guards
    (dealloc,) = [e for e in log if isinstance(e.data, ClaimDeallocated)]
    assert dealloc.data == ClaimDeallocated(reason="NoConsumers", released=(uid,))
    assert "#" not in dealloc.id  # a single message, not one of a batch
    assert not [e for e in log if isinstance(e.data, ClaimReservationsReleased)]
    freed = rt.get("ResourceClaim", "default", "c")
    assert freed.status.allocation is None and freed.status.reserved_for == ()
    assert DELETE_PROTECTION_FINALIZER not in freed.metadata.finalizers


async def test_kubelet_deallocation_through_the_apiserver_is_one_single_append(
    apiserver: ApiServer, settings: Settings, event_store: EventStore
) -> None:
    """A pod deleted on its node: the claim's last reservation goes and the claim is deallocated
    (by the kubelet through the apiserver, or by the claim controller: whoever is first); either
    way in one single ``ClaimDeallocated`` naming the pod, no guard message."""
    probe, probe_events = await start_runtime(settings, "probe")
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    kubelet, _ = await run(settings, "kubelet", kubelet_builder(settings, "node-1"), before=register_node)
    try:
        claim_name = await template_pod_running(probe)
        (res,) = await probe.api.delete([("Pod", "default", "pod0")])
        assert res.error is None
        await eventually(
            lambda: probe.get("ResourceClaim", "default", claim_name) is None, what="claim freed"
        )
    finally:
        for s in (kubelet, ctl):
            await s.stop()
        await probe.stop()
        await probe_events.close()
    store = event_store
    log = await store.events(f"{store.root}.ev.>")
    (dealloc,) = [e for e in log if isinstance(e.data, ClaimDeallocated)]
    assert isinstance(dealloc.data, ClaimDeallocated) and len(dealloc.data.released) == 1
    assert "#" not in dealloc.id  # a single message, not one of a batch
    assert not [e for e in log if isinstance(e.data, ClaimReservationsReleased | GuardReleased)]
