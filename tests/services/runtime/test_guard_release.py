"""Deallocations give the claim's guards back in the same atomic batch (``draflow.infra.guard``):
the claim controller's writes through the object cache, and a kubelet's that the apiserver
appends after NodeRestriction admitted them."""

from __future__ import annotations

import msgspec

from draflow.events.api.resource_v1 import (
    Counter,
    CounterSet,
    Device,
    DeviceCounterConsumption,
)
from draflow.events.dra import ClaimDeallocated, ClaimReservationsReleased
from draflow.events.envelope import Envelope, Event
from draflow.events.guard import GuardReleased
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.apiserver.server import ApiServer
from draflow.services.claim_controller.service import ClaimControllerService
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


async def test_claim_controller_deallocation_releases_device_and_counter_guards(
    runtime: Runtime, apiserver: ApiServer, event_store: EventStore
) -> None:
    """A partition consuming a counter set: the deallocation releases the device's guard and the
    counter set's, in the batch of ``ClaimDeallocated`` (consecutive sequences, one message id)."""
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
    assert await rt.append(
        "ResourceClaim",
        "default",
        "c",
        [ClaimReservationsReleased(uids=(uid,)), ClaimDeallocated(reason="NoConsumers")],
    )
    log = await store.events(f"{store.root}.ev.>")
    assert _guards(log, store.root) == [
        ("counters", "gpu.example.com/node-1/gpu-0", "GuardReleased"),
        ("device", "gpu.example.com/node-1/gpu-0-half", "GuardReleased"),
    ]
    dealloc = next(e for e in log if isinstance(e.data, ClaimDeallocated))
    releases = [e for e in log if isinstance(e.data, GuardReleased)]
    assert [e.seq for e in releases] == [dealloc.seq + 1, dealloc.seq + 2]
    base = dealloc.id.split("#")[0]
    assert [e.id for e in releases] == [f"{base}#g0", f"{base}#g1"]
    holder = GuardReleased(
        holder="ResourceClaim default/c", holder_uid=rt.get("ResourceClaim", "default", "c").metadata.uid
    )
    assert all(e.data == holder for e in releases)
    assert all(e.actor == dealloc.actor for e in releases)


async def test_kubelet_deallocation_through_the_apiserver_releases_the_guards(
    apiserver: ApiServer, settings: Settings, event_store: EventStore
) -> None:
    """A pod deleted on its node: the claim's last reservation goes and the claim is deallocated
    (by the kubelet through the apiserver, or by the claim controller: whoever is first); either
    way the device's guard is released in the same batch."""
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
    (release,) = [e for e in log if isinstance(e.data, GuardReleased)]
    assert _guards([release], store.root) == [("device", "gpu.example.com/node-1/gpu-1", "GuardReleased")]
    assert release.seq == dealloc.seq + 1 and release.actor == dealloc.actor
    assert release.id == f"{dealloc.id.split('#')[0]}#g0"
