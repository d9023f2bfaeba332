"""Two scheduler processes race over twelve extended-resource pods (the README's two-scheduler demo).

Real processes: apiserver, claim controller, two schedulers (``DRAFLOW_SCHEDULER_ID`` scheduler-a
and scheduler-b), the gpu.example.com slice publisher and two kubelets with 18 GPUs each. The
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

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.dra import PodResourcesPrepared
from draflow.events.saga import TERMINAL_SAGA_EVENTS
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.guard import guard_subject, held
from draflow.projections.objects import fold
from draflow.services.runtime.controller import Runtime
from tests.helpers import wait_for
from tests.processes import ROOT, Proc, draflow, node_services, stop_cleanly
from tests.shells import manifests, start_runtime

pytestmark = pytest.mark.kep5004

NS = "race-gpu"
PODS = ROOT / "examples" / "debugging" / "twelve-gpu-pods.yaml"
EXTENDED_CLASS = ROOT / "examples" / "extended-resources" / "gpu-example-extended.yaml"
NODES = ("node-1", "node-2")
INSTANCES = ("scheduler-a", "scheduler-b")
ROUNDS = 3  # of twelve pods each: 36 GPUs at most


@pytest.fixture
async def race_cluster(settings: Settings) -> AsyncIterator[tuple[Runtime, EventStore, list[Proc]]]:
    procs = [Proc(settings, "draflow.services.apiserver")]
    schedulers: list[Proc] = []
    try:
        await asyncio.to_thread(procs[0].expect, "apiserver: serving", 60)
        probe, events = await start_runtime(settings, "e2e-probe")
        try:
            for result in await probe.api.apply(manifests(EXTENDED_CLASS.read_text())):
                assert result.error is None, result.error
            services: list[tuple[Proc, str]] = [
                (Proc(settings, "draflow.services.claim_controller"), "claim-controller: following"),
                (Proc(settings, "draflow.services.drivers.gpu_example"), "gpu-example-driver: publishing"),
            ]
            services += [
                (Proc(settings, module, args), ready)
                for n in NODES
                for module, args, ready in node_services(n, 18)
                if ready is not None
            ]
            schedulers += [
                Proc(settings, "draflow.services.scheduler", DRAFLOW_SCHEDULER_ID=i) for i in INSTANCES
            ]
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
    raced = 0
    for n in range(ROUNDS):
        # a round: twelve more pods in a namespace of their own; until one round was raced by
        # both instances (on a loaded machine one of them may get no CPU until the other is done)
        uids, sagas = await _round(probe, events, schedulers, settings, f"{NS}-{n}")
        by_instance = Counter(s.rsplit(".", 1)[-1].split("-ps-")[0] for s in sagas)
        if set(by_instance) == set(INSTANCES) and len(sagas) > len(uids):
            raced += 1
            break
    assert raced, f"no round was raced by both instances: {by_instance}"
    # every pod of every round, read from the log itself (no cache in between)
    used: Counter[tuple[str, str]] = Counter()
    binders: dict[tuple[str, str], str] = {}
    for p in probe.items("Pod"):
        if not p.metadata.namespace.startswith(NS):
            continue
        key = (p.metadata.namespace, p.metadata.name)
        device, binder = await _check_pod(events, *key)
        used[device] += 1
        binders[key] = binder
    assert len(binders) == 12 * (n + 1)
    assert max(used.values()) == 1, f"a device given out twice: {used}"

    # the Events' reportingInstance names the instance that bound the pod
    scheduled: dict[tuple[str, str], dict[str, Any]] = {}
    deadline = asyncio.get_running_loop().time() + 30
    while sorted(scheduled) != sorted(binders):  # recorded right after the bind, a moment later
        assert asyncio.get_running_loop().time() < deadline, sorted(scheduled)
        await asyncio.sleep(0.2)
        items, _ = await probe.api.list("Event")
        scheduled = {
            (e["metadata"]["namespace"], e["involvedObject"]["name"]): e
            for e in items
            if e["reason"] == "Scheduled" and e["metadata"]["namespace"].startswith(NS)
        }
    for key, ev in scheduled.items():
        assert ev["source"] == {"component": "default-scheduler"}
        assert ev["reportingComponent"] == "default-scheduler"
        assert ev["reportingInstance"] == f"default-scheduler-{binders[key]}", ev


async def _round(
    probe: Runtime, events: EventStore, schedulers: list[Proc], settings: Settings, ns: str
) -> tuple[set[str], list[str]]:
    """Apply the twelve pods into ``ns`` while both schedulers are stopped, continue both together
    (as scheduler_perf pauses the scheduler), wait for the pods to run and every saga to end.
    Returns the pods' uids and the PodScheduling sagas about them."""
    for p in schedulers:
        p.proc.send_signal(signal.SIGSTOP)
    docs = manifests(
        PODS.read_text()
        .replace(f"name: {NS}}}", f"name: {ns}}}")
        .replace(f"namespace: {NS},", f"namespace: {ns},")
    )
    for result in await probe.api.apply(docs):
        assert result.error is None, result.error

    def pods() -> list[Pod]:
        return [p for p in probe.items("Pod") if p.metadata.namespace == ns]

    await wait_for(lambda: len(pods()) == 12 or [], 30, f"the pods of {ns}")
    for p in schedulers:
        p.proc.send_signal(signal.SIGCONT)

    def all_running() -> bool | list[str]:
        waiting = [f"{p.metadata.name}:{p.status.phase}" for p in pods() if p.status.phase != "Running"]
        return not waiting or waiting

    await wait_for(all_running, 90, f"the pods of {ns} Running")
    uids = {p.metadata.uid for p in pods()}
    deadline = asyncio.get_running_loop().time() + 30
    while True:  # the losing sagas' compensations may still run after the pods started
        try:
            sagas = await _sagas_finished(events, settings.root)
            break
        except AssertionError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)
    mine = [s for s in sagas if "-ps-" in s and s.rsplit(".", 1)[-1].split("-ps-")[1][:36] in uids]
    return uids, mine


async def _check_pod(events: EventStore, ns: str, name: str) -> tuple[tuple[str, str], str]:
    """The pod runs with its special claim: existing, allocated on its node, reserved for it, its
    device prepared; bound by an instance that says so. Returns (node, device) and the binder."""
    pod = await _load(events, "Pod", ns, name)
    assert isinstance(pod, Pod) and pod.status.phase == "Running", name
    status = pod.status.extended_resource_claim_status
    assert status is not None, f"{ns}/{name} lost its extendedResourceClaimStatus"
    claim = await _load(events, "ResourceClaim", ns, status.resource_claim_name)
    assert isinstance(claim, ResourceClaim), f"{ns}/{name}: claim {status.resource_claim_name} gone"
    alloc = claim.status.allocation
    assert alloc is not None, f"{ns}/{name}: claim {claim.metadata.name} deallocated"
    (device,) = alloc.devices.results
    assert device.pool == pod.spec.node_name, (name, device)
    assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid], name
    history = await events.events(events.subject("Pod", ns, name))
    prepared = [e.data for e in history if isinstance(e.data, PodResourcesPrepared)]
    assert prepared, f"{ns}/{name} was not prepared"
    cdi = {c.container: c.cdi_ids for c in prepared[-1].containers}["ctr0"]
    assert f"k8s.gpu.example.com/gpu={claim.metadata.uid}-{device.device}" in cdi, cdi
    (bound,) = [e for e in history if e.type == "PodBound"]
    # the log's actor is the instance, the saga id says the same
    assert bound.actor in INSTANCES and bound.correlation_id.startswith(f"{bound.actor}-ps-"), bound
    return (device.pool, device.device), bound.actor


async def _load(events: EventStore, kind: str, ns: str, name: str) -> Any:
    loaded = await events.load(
        events.subject(kind, ns, name), lambda s, env: fold(s, env.type, env.data, env.seq), None
    )
    return loaded.state


TEMPLATE_PODS = ROOT / "examples" / "debugging" / "twelve-pods.yaml"


async def test_two_schedulers_deciding_different_pods_never_share_a_device(
    race_cluster: tuple[Runtime, EventStore, list[Proc]], settings: Settings
) -> None:
    """The README's first race: twelve pods, each with its own claim from a template, decided by
    both instances at once. Each instance may pick the same free device for *different* claims;
    the device guards let one allocation land. Every pod runs on a device of its own, each
    device's guard is held by exactly the claim allocated it, and ``draflow check`` holds."""
    probe, events, schedulers = race_cluster
    text = TEMPLATE_PODS.read_text()
    for n in range(ROUNDS):
        ns = f"race-{n}"
        for p in schedulers:
            p.proc.send_signal(signal.SIGSTOP)
        docs = manifests(
            text.replace("name: race}", f"name: {ns}}}").replace("namespace: race,", f"namespace: {ns},")
        )
        for result in await probe.api.apply(docs):
            assert result.error is None, result.error

        def claims(ns: str = ns) -> bool | list[str]:
            names = [c.metadata.name for c in probe.items("ResourceClaim") if c.metadata.namespace == ns]
            return len(names) == 12 or names

        await wait_for(claims, 30, f"the claims of {ns}")
        for p in schedulers:
            p.proc.send_signal(signal.SIGCONT)

        def running(ns: str = ns) -> bool | list[str]:
            pods = [p for p in probe.items("Pod") if p.metadata.namespace == ns]
            waiting = [p.metadata.name for p in pods if p.status.phase != "Running"]
            return (len(pods) == 12 and not waiting) or waiting

        await wait_for(running, 90, f"the pods of {ns} Running")
    owners: dict[str, str] = {}  # guard subject -> the claim uid allocated that device
    for claim in probe.items("ResourceClaim"):
        if not claim.metadata.namespace.startswith("race-") or claim.metadata.namespace.startswith(NS):
            continue
        alloc = await _load(events, "ResourceClaim", claim.metadata.namespace, claim.metadata.name)
        assert isinstance(alloc, ResourceClaim) and alloc.status.allocation is not None, claim.metadata.name
        for r in alloc.status.allocation.devices.results:
            subject = guard_subject(settings.root, "device", f"{r.driver}/{r.pool}/{r.device}")
            assert subject not in owners, (
                f"{r.device} given to {owners.get(subject)} and {alloc.metadata.uid}"
            )
            owners[subject] = alloc.metadata.uid
    assert len(owners) == 12 * ROUNDS
    for subject, uid in owners.items():
        assert set(held(await events.events(subject))) == {uid}, subject
    done = await asyncio.to_thread(draflow, settings, "check")
    assert done.returncode == 0 and "ok        device-once" in done.stdout, done.stdout + done.stderr
