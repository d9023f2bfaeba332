"""Two scheduler processes race over twelve extended-resource pods (the README's two-scheduler demo).

Real processes: apiserver, claim controller, two schedulers (``DRAFLOW_SCHEDULER_ID`` scheduler-a
and scheduler-b), the gpu.example.com slice publisher and two kubelets with 8 GPUs each. The
DeviceClass maps ``example.com/gpu`` (``examples/extended-resources/gpu-example-extended.yaml``)
and ``examples/debugging/twelve-gpu-pods.yaml`` asks for one each. Both instances decide the same
pods and derive the same special claim for each; whichever saga loses compensates. Afterwards
every pod runs with its own special claim — existing, allocated on the pod's node, reserved for it,
named in its ``extendedResourceClaimStatus``, its devices prepared — no device is given out twice,
and every scheduler Event and log entry says which instance wrote it.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from events.api.core_v1 import Pod
from events.api.resource_v1 import ResourceClaim
from events.dra import PodResourcesPrepared
from events.saga import TERMINAL_SAGA_EVENTS
from infra.config import Settings
from infra.eventstore import EventStore
from services.claim_controller.runtime import Runtime
from tests.controllers.shells import manifests, start_runtime
from tests.e2e.procs import ROOT, Proc, stop_cleanly
from tests.e2e.test_demo import wait_for

NS = "race-gpu"
PODS = ROOT / "examples" / "debugging" / "twelve-gpu-pods.yaml"
EXTENDED_CLASS = ROOT / "examples" / "extended-resources" / "gpu-example-extended.yaml"
NODES = ("node-1", "node-2")
INSTANCES = ("scheduler-a", "scheduler-b")


@pytest.fixture
async def race_cluster(settings: Settings) -> AsyncIterator[tuple[Runtime, EventStore, list[Proc]]]:
    procs = [Proc(settings, "services.apiserver")]
    schedulers: list[Proc] = []
    try:
        await asyncio.to_thread(procs[0].expect, "apiserver: serving", 60)
        probe, events = await start_runtime(settings, "e2e-probe")
        try:
            for result in await probe.api.apply(manifests(EXTENDED_CLASS.read_text())):
                assert result.error is None, result.error
            services: list[tuple[Proc, str]] = [
                (Proc(settings, "services.claim_controller"), "claim-controller: following"),
                (Proc(settings, "services.drivers.gpu_example"), "gpu-example-driver: publishing"),
            ]
            services += [
                (Proc(settings, "services.kubelet", ["--node", n, "--gpus", "8"]), f"kubelet {n}: registered")
                for n in NODES
            ]
            schedulers += [Proc(settings, "services.scheduler", DRAFLOW_SCHEDULER_ID=i) for i in INSTANCES]
            services += [(p, f"{i}: scheduling") for p, i in zip(schedulers, INSTANCES, strict=True)]
            procs += [p for p, _ in services]
            for proc, ready in services:
                await asyncio.to_thread(proc.expect, ready, 90)
            await wait_for(lambda: len(probe.items("ResourceSlice")) == len(NODES) or [], 60, "the slices")
            yield probe, events, schedulers
        finally:
            await probe.stop()
            await events.close()
    finally:
        for p in schedulers:  # a failure while they were stopped must not keep them stopped
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
        await stop_cleanly(procs)


async def _sagas_finished(events: EventStore, root: str) -> list[str]:
    """Every saga's subject once each has a terminal event (both instances' sagas)."""
    heads = [r async for records in events.last_per_subject(f"{root}.ev.Saga._.*") for r in records]
    open_ = [r.subject for r in heads if r.header("Draflow-Type") not in TERMINAL_SAGA_EVENTS]
    assert heads and not open_, open_
    return [r.subject for r in heads]


async def test_two_schedulers_keep_every_running_pods_special_claim(
    race_cluster: tuple[Runtime, EventStore, list[Proc]], settings: Settings
) -> None:
    probe, events, schedulers = race_cluster
    # both instances see all twelve pods at the same moment (as scheduler_perf pauses the
    # scheduler): stopped while the pods are created, continued together
    for p in schedulers:
        p.proc.send_signal(signal.SIGSTOP)
    for result in await probe.api.apply(manifests(PODS.read_text())):
        assert result.error is None, result.error
    await wait_for(
        lambda: len([p for p in probe.items("Pod") if p.metadata.namespace == NS]) == 12 or [], 30, "pods"
    )
    for p in schedulers:
        p.proc.send_signal(signal.SIGCONT)

    def all_running() -> bool | list[str]:
        pods = [p for p in probe.items("Pod") if p.metadata.namespace == NS]
        waiting = [f"{p.metadata.name}:{p.status.phase}" for p in pods if p.status.phase != "Running"]
        return (len(pods) == 12 and not waiting) or waiting or ["no pods yet"]

    await wait_for(all_running, 90, "twelve pods Running")

    async def settled() -> list[str]:
        return await _sagas_finished(events, settings.root)

    deadline = asyncio.get_running_loop().time() + 30
    while True:  # the losing sagas' compensations may still run after the pods started
        try:
            sagas = await settled()
            break
        except AssertionError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)

    # read everything from the log itself (no cache in between)
    pods: dict[str, Pod] = {}
    used: Counter[tuple[str, str]] = Counter()
    for p in probe.items("Pod"):
        if p.metadata.namespace != NS:
            continue
        pod = await _load(events, "Pod", p.metadata.name)
        assert isinstance(pod, Pod) and pod.status.phase == "Running", p.metadata.name
        pods[pod.metadata.name] = pod
        status = pod.status.extended_resource_claim_status
        assert status is not None, f"{pod.metadata.name} lost its extendedResourceClaimStatus"
        claim = await _load(events, "ResourceClaim", status.resource_claim_name)
        assert isinstance(claim, ResourceClaim), (
            f"{pod.metadata.name}: claim {status.resource_claim_name} gone"
        )
        alloc = claim.status.allocation
        assert alloc is not None, f"{pod.metadata.name}: claim {claim.metadata.name} deallocated"
        (device,) = alloc.devices.results
        assert device.pool == pod.spec.node_name, (pod.metadata.name, device)
        used[(device.pool, device.device)] += 1
        assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid], pod.metadata.name
        prepared = [
            e.data
            for e in await events.events(events.subject("Pod", NS, pod.metadata.name))
            if isinstance(e.data, PodResourcesPrepared)
        ]
        assert prepared, f"{pod.metadata.name} was not prepared"
        cdi = {c.container: c.cdi_ids for c in prepared[-1].containers}["ctr0"]
        assert f"k8s.gpu.example.com/gpu={claim.metadata.uid}-{device.device}" in cdi, cdi
    assert len(pods) == 12
    assert max(used.values()) == 1, f"a device given out twice: {used}"

    # who did what: the log's actor and the Events' reportingInstance name the instance
    binders: dict[str, str] = {}
    for name in pods:
        for env in await events.events(events.subject("Pod", NS, name)):
            if env.type == "PodBound":
                assert env.actor in INSTANCES and env.correlation_id.startswith(f"{env.actor}-ps-"), env
                binders[name] = env.actor
    assert sorted(binders) == sorted(pods)
    scheduled: dict[str, dict[str, Any]] = {}
    deadline = asyncio.get_running_loop().time() + 30
    while sorted(scheduled) != sorted(pods):  # recorded right after the bind, best effort: a moment later
        assert asyncio.get_running_loop().time() < deadline, sorted(scheduled)
        await asyncio.sleep(0.2)
        items, _ = await probe.api.list("Event", namespace=NS)
        scheduled = {e["involvedObject"]["name"]: e for e in items if e["reason"] == "Scheduled"}
    for name, ev in scheduled.items():
        assert ev["source"] == {"component": "default-scheduler"}
        assert ev["reportingComponent"] == "default-scheduler"
        assert ev["reportingInstance"] == f"default-scheduler-{binders[name]}", ev
    # the race was real: both instances started sagas, and some of them had to give way
    by_instance = Counter(s.rsplit(".", 1)[-1].split("-ps-")[0] for s in sagas if "-ps-" in s)
    assert set(by_instance) == set(INSTANCES), by_instance
    assert len(sagas) > 12, f"no scheduling attempt lost a race: {sagas}"


async def _load(events: EventStore, kind: str, name: str) -> Any:
    from projections.objects import fold

    loaded = await events.load(
        events.subject(kind, NS, name), lambda s, env: fold(s, env.type, env.data, env.seq), None
    )
    return loaded.state
