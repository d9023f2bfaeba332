"""Memory in proportion to live state: pods come and go through every service in-process (a real
apiserver, scheduler, claim controller, kubelet, driver and the log-fed caches) and afterwards no service
holds more entries in its maps, sets and lists than after the first pod, although the log grew.

The count walks each service object's attributes (draflow's own objects, containers inside them,
not the API objects, which are immutable state): a structure keyed by pod, uid, claim or event
that is never pruned grows by one entry per pod and fails the test, naming it.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import msgspec
import pytest

from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.apiserver.server import ApiServer
from draflow.services.claim_controller.service import ClaimControllerService
from draflow.services.drivers.gpu_example.publisher import SlicePublisher
from draflow.services.runtime.client import ApiClient
from draflow.services.scheduler.service import SchedulerService
from tests.builders.manifests import gpu_template_yaml
from tests.services.scheduler.service.test_prepare_failure import DEVICE_CLASS
from tests.services.test_shells import kubelet_builder
from tests.shells import Running, eventually, manifests, run, start_runtime

pytestmark = pytest.mark.kep4381

_CONTAINERS = (dict, list, set, frozenset, collections.deque, collections.Counter)


def entries(root: Any, name: str) -> dict[str, int]:
    """Path -> entries, for every container reachable from ``root`` through draflow objects."""
    out: dict[str, int] = {}
    seen: set[int] = set()
    stack: list[tuple[str, Any, int]] = [(name, root, 0)]
    while stack:
        path, obj, depth = stack.pop()
        if id(obj) in seen or depth > 14 or isinstance(obj, msgspec.Struct | str | bytes | int | float):
            continue
        seen.add(id(obj))
        if isinstance(obj, collections.deque) and obj.maxlen is not None:
            continue  # a ring: bounded by construction
        if isinstance(obj, _CONTAINERS):
            out[path] = out.get(path, 0) + len(obj)
            values = obj.values() if isinstance(obj, dict) else obj
            if len(obj) < 5000:
                stack.extend((f"{path}[]", v, depth + 1) for v in list(values))
        elif isinstance(obj, tuple):
            stack.extend((f"{path}[]", v, depth + 1) for v in obj)
        elif type(obj).__module__.startswith("draflow."):
            attrs = dict(getattr(obj, "__dict__", {}))
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    attrs[slot] = getattr(obj, slot)
            stack.extend((f"{path}.{k}", v, depth + 1) for k, v in attrs.items())
    return out


def grown(before: dict[str, int], after: dict[str, int]) -> dict[str, tuple[int, int]]:
    return {p: (before.get(p, 0), n) for p, n in after.items() if n > before.get(p, 0)}


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
        },
    }


async def test_pods_that_come_and_go_leave_no_entries_behind(
    apiserver: ApiServer, api: ApiClient, settings: Settings
) -> None:
    ctl, ctl_svc = await run(settings, "claim-controller", ClaimControllerService)
    kubelet, kl = await run(settings, "kubelet", kubelet_builder(settings, "node-1"), before=_register)
    driver, _ = await run(settings, "driver", SlicePublisher)
    sched_store = await EventStore.open(settings, "scheduler")
    scheduler = SchedulerService(sched_store, api=api)
    stop = asyncio.Event()
    sched_task = asyncio.create_task(scheduler.run(stop))
    probe, probe_events = await start_runtime(settings, "probe")
    services: list[Running] = [ctl, kubelet, driver]
    try:
        await eventually(lambda: probe.items("ResourceSlice"), what="slices")
        setup = manifests(DEVICE_CLASS) + manifests(gpu_template_yaml())
        assert all(r.error is None for r in await probe.api.apply(setup))

        async def lifecycle(name: str) -> None:
            assert [r.error for r in await probe.api.apply([pod(name)])] == [None]
            await eventually(
                lambda: (p := probe.get("Pod", "default", name)) is not None and p.status.phase == "Running",
                what=f"{name} Running",
            )
            assert [r.error for r in await probe.api.delete([("Pod", "default", name)])] == [None]
            await eventually(lambda: probe.get("Pod", "default", name) is None, what=f"{name} gone")
            await eventually(lambda: not probe.items("ResourceClaim", "default"), what=f"{name} claim gone")

        async def settled() -> dict[str, int]:
            last = await probe_events.stream_last_seq()
            for rt in (probe, ctl.rt, kubelet.rt, driver.rt):
                await rt.cache.wait_position(last)
            await apiserver.store.wait_position(last)
            await scheduler.snapshot.wait_position(last)
            roots = {"apiserver": apiserver, "controller": ctl_svc, "kubelet": kl, "probe": probe}
            roots |= {"scheduler": scheduler}
            roots |= {"controller_rt": ctl.rt, "kubelet_rt": kubelet.rt, "driver_rt": driver.rt}
            out: dict[str, int] = {}
            for name, root in roots.items():
                out |= entries(root, name)
            return out

        apiserver.event_expiry.ttl_s = 1.0  # Events (Scheduled, ...) live a second here, not an hour

        async def expire_events() -> None:
            await asyncio.sleep(2.1)  # Event times have a resolution of one second
            await apiserver.event_expiry.sweep()
            assert not apiserver.store.index.items("Event")

        await lifecycle("warm-up")
        await expire_events()
        before, log_before = await settled(), await probe_events.stream_last_seq()
        for i in range(6):
            await lifecycle(f"pod-{i}")
        await expire_events()
        assert await probe_events.stream_last_seq() > log_before + 6 * 10
        growth: dict[str, tuple[int, int]] = {}
        for _ in range(40):  # work queues drain shortly after the last event: look again
            growth = grown(before, await settled())
            if not growth:
                break
            await asyncio.sleep(0.1)
        kinds = {k: len(probe.cache.index.items(k)) for k in probe.cache.index.kinds()}
        assert not growth, f"grew: {sorted(growth.items())}; live objects: {kinds}"
    finally:
        stop.set()
        await asyncio.wait({sched_task}, timeout=10)
        await sched_store.close()
        for s in services:
            await s.stop()
        await probe.stop()
        await probe_events.close()


async def _register(svc: Any) -> None:
    await svc.register()
