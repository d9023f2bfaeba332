"""The scheduler's classic plugin: its asks, and their atomic writes against a real nats-server."""

from __future__ import annotations

import asyncio

import pytest

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.classic_pod import decode_manifest
from draflow.events.api.core_v1 import Pod
from draflow.events.api.meta import ObjectMeta
from draflow.events.objects import object_applied, status_updated
from draflow.infra.eventstore import EventStore
from draflow.services.dra.classic import claims as cl
from draflow.services.dra.classic.plugin import AllocationResult
from draflow.services.dra.classic.validation import admit_classic
from draflow.services.dra.resourceclaim import pod_owner_reference
from draflow.services.driver_controller.store import EventClaimStore
from draflow.services.scheduler.framework import (
    ActionType,
    ClusterEvent,
    EventResource,
    Scheduler,
    Unschedulable,
)
from draflow.services.scheduler.plugins import default_plugins
from draflow.services.scheduler.plugins.classic import NAME, ClassicDynamicResources
from draflow.services.scheduler.plugins.classic.feed import ClassicFeed
from draflow.services.scheduler.plugins.classic.plugin import WAIT_ALLOCATION, WAIT_INFORMATION
from draflow.services.scheduler.plugins.classic.writes import (
    POTENTIAL,
    REALLOCATE,
    RESERVE,
    SELECT,
    ClaimWrite,
    apply_write,
)
from tests.builders import make_node, make_pod
from tests.builders.classic import make_classic_claim

pytestmark = pytest.mark.kep3063


async def _allocated_claim(store: EventStore, name: str, user_limit: int) -> cv.ResourceClaim:
    claim = make_classic_claim(name, "fpga", {})
    subject = store.subject(cv.CLAIM_KIND, "default", name)
    await store.append(subject, object_applied(claim), expected_last_seq=0)
    allocated = cl.allocated(claim, "fpga.example.com", AllocationResult(user_limit=user_limit))
    await store.append(subject, status_updated(cv.CLAIM_KIND, allocated.status), expected_last_seq=None)
    return allocated


async def test_concurrent_schedulers_respect_user_limit(event_store: EventStore) -> None:
    """Two scheduler instances (own connections) reserve one claim for different pods at once:
    with userLimit 1 exactly one pod ends up in reservedFor, with -1 both do."""
    stores = [await EventStore.open(event_store.settings, f"sched-{i}") for i in range(2)]
    try:
        feeds = [ClassicFeed(s, Scheduler(plugins=default_plugins()), lambda: None) for s in stores]
        for name, limit in (("single", 1), ("multi", -1)):
            claim = await _allocated_claim(event_store, name, limit)
            for i, feed in enumerate(feeds):
                ref = pod_owner_reference(make_pod(f"{name}-p{i}"))
                feed.submit(
                    ClaimWrite(op=RESERVE, namespace="default", name=name, uid=claim.metadata.uid, pod=ref)
                )
            await asyncio.gather(*(f.drain() for f in feeds))
        single, _ = await EventClaimStore(event_store).load("default", "single")
        multi, _ = await EventClaimStore(event_store).load("default", "multi")
        assert single is not None and len(single.status.reserved_for) == 1
        assert multi is not None and sorted(u.name for u in multi.status.reserved_for) == [
            "multi-p0",
            "multi-p1",
        ]
        assert sum(f.written for f in feeds) == 3
    finally:
        for s in stores:
            await s.close()


def test_asks_are_decided_on_the_latest_claim() -> None:
    claim = cl.allocated(
        admit_classic(
            cv.ResourceClaim(
                metadata=ObjectMeta(name="c", namespace="default", uid="u"),
                spec=cv.ResourceClaimSpec(resource_class_name="fpga"),
            )
        ),
        "fpga.example.com",
        AllocationResult(),
    )
    p1, p2 = pod_owner_reference(make_pod("p1")), pod_owner_reference(make_pod("p2"))
    reserved = apply_write(claim, ClaimWrite(op=RESERVE, namespace="default", name="c", uid="u", pod=p1))
    assert isinstance(reserved, cv.ResourceClaim)
    assert apply_write(reserved, ClaimWrite(op=RESERVE, namespace="default", name="c", pod=p2)) == (
        "in use by 1 (userLimit 1)"
    )
    assert apply_write(claim, ClaimWrite(op=RESERVE, namespace="default", name="c", uid="other", pod=p1)) == (
        "the claim was replaced"
    )
    # Reallocate: only while no other pod uses it; the asking pod's own reservation is dropped
    assert apply_write(reserved, ClaimWrite(op=REALLOCATE, namespace="default", name="c", pod=p2)) == (
        "the claim is in use by another consumer"
    )
    freed = apply_write(reserved, ClaimWrite(op=REALLOCATE, namespace="default", name="c", pod=p1))
    assert isinstance(freed, cv.ResourceClaim)
    assert freed.status.phase == cv.REALLOCATE and freed.status.reserved_for == ()


def _kep_pod(name: str, claims: dict[str, str]) -> Pod:
    """A KEP Pod as the apiserver stores it (annotation form) referring to existing claims."""
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "resourceClaims": [{"name": k, "resourceClaimName": v} for k, v in claims.items()],
            "containers": [{"name": "app", "image": "x", "resources": {"claims": list(claims)}}],
        },
    }
    pod = decode_manifest(manifest)
    assert isinstance(pod, Pod)
    return pod


def _pending(name: str) -> cv.ResourceClaim:
    return admit_classic(
        cv.ResourceClaim(
            metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"),
            spec=cv.ResourceClaimSpec(resource_class_name="acme-gpu", parameters={"memory": "2Gi"}),
        )
    )


def _two_nodes() -> tuple[Scheduler, ClassicDynamicResources]:
    """A scheduler with the default plugins and nodes node-a and node-b, and its classic plugin."""
    core = Scheduler(plugins=default_plugins())
    plugin = core.profile.plugin(NAME)
    assert isinstance(plugin, ClassicDynamicResources)
    core.observe(make_node("node-a"))
    core.observe(make_node("node-b"))
    return core, plugin


def test_reserve_waits_for_the_drivers_answer_with_several_claims() -> None:
    """Two pending Delayed claims: the first attempt publishes potentialNodes and waits (no node
    selected); once the driver marked node-a unsuitable, the next attempt selects node-b."""
    core, plugin = _two_nodes()
    g1, g2 = _pending("g1"), _pending("g2")
    plugin.observe(g1)
    plugin.observe(g2)
    pod = _kep_pod("p", {"a": "g1", "b": "g2"})

    first = core.schedule(pod)
    # A Reserve wait is Unschedulable (upstream), not a scheduling error: the pod waits in the
    # pool for its claims to change.
    assert isinstance(first, Unschedulable) and first.unschedulable_plugins == {NAME}
    assert first.message == f"0/1 nodes are available: 1 {WAIT_INFORMATION}."
    assert {(w.op, w.name, w.nodes) for w in plugin.outbox} == {
        (POTENTIAL, "g1", ("node-a", "node-b")),
        (POTENTIAL, "g2", ("node-a", "node-b")),
    }
    plugin.outbox.clear()
    for c in (g1, g2):  # the writes landed, and the driver answered
        published = cl.with_potential_nodes(c, ("node-a", "node-b"))
        plugin.observe(cl.with_driver_answer(published, ("node-a", "node-b"), ("node-a",)))

    second = core.schedule(pod)
    assert isinstance(second, Unschedulable) and second.unschedulable_plugins == {NAME}
    assert second.node_reasons == ((WAIT_ALLOCATION, 1),)
    assert sorted((w.op, w.name, w.node) for w in plugin.outbox) == [
        (SELECT, "g1", "node-b"),
        (SELECT, "g2", "node-b"),
    ]
    plugin.outbox.clear()
    for name in ("g1", "g2"):  # selected: the attempt stays stopped until the driver allocates
        claim = plugin.claims["default"][name]
        plugin.observe(cl.with_selected_node(claim, "node-b"))
    third = core.schedule(pod)
    assert isinstance(third, Unschedulable) and WAIT_ALLOCATION in third.message
    assert plugin.outbox == []


def test_potential_nodes_published_earlier_are_not_an_answer() -> None:
    """The potentialNodes from an earlier attempt have landed, but the driver has not answered
    them: Reserve still waits (no node selected). It selects once both claims record an answer
    to exactly the published list, and a stale answer (to an older list) does not count."""
    core, plugin = _two_nodes()
    nodes = ("node-a", "node-b")
    g1 = cl.with_potential_nodes(_pending("g1"), nodes)
    g2 = cl.with_driver_answer(cl.with_potential_nodes(_pending("g2"), nodes), ("node-a",), ())
    plugin.observe(g1)
    plugin.observe(g2)
    pod = _kep_pod("p", {"a": "g1", "b": "g2"})

    waiting = core.schedule(pod)
    assert (
        isinstance(waiting, Unschedulable)
        and waiting.message == f"0/1 nodes are available: 1 {WAIT_INFORMATION}."
    )
    assert plugin.outbox == []  # nothing to publish again, nothing selected

    plugin.observe(cl.with_driver_answer(g1, nodes, ()))  # g1 answered; g2's answer is stale
    assert isinstance(core.schedule(pod), Unschedulable) and plugin.outbox == []

    plugin.observe(cl.with_driver_answer(g2, nodes, ("node-a",)))
    selected = core.schedule(pod)
    assert isinstance(selected, Unschedulable) and selected.node_reasons == ((WAIT_ALLOCATION, 1),)
    assert sorted((w.op, w.name, w.node) for w in plugin.outbox) == [
        (SELECT, "g1", "node-b"),
        (SELECT, "g2", "node-b"),
    ]


def test_the_pod_is_requeued_on_the_drivers_answer_not_on_its_own_write() -> None:
    """Upstream's hint on PodSchedulingContext updates: the scheduler's potentialNodes landing
    leaves the waiting pod in the pool (an attempt could only wait again); the driver's answer
    for every pending claim moves it on, and an idle scheduler takes it before its backoff ends."""
    core, plugin = _two_nodes()
    g1, g2 = _pending("g1"), _pending("g2")
    pod = _kep_pod("p", {"a": "g1", "b": "g2"})
    key = "default/p"

    def land(claim: cv.ResourceClaim) -> None:  # as ClassicFeed.apply reports a claim change
        plugin.observe(claim)
        core.queue.on_event(ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.ADD, None, claim))

    land(g1)
    land(g2)
    core.observe(pod)
    step = core.schedule_next()
    assert step is not None and isinstance(step[1], Unschedulable)
    nodes = ("node-a", "node-b")
    g1, g2 = cl.with_potential_nodes(g1, nodes), cl.with_potential_nodes(g2, nodes)
    land(g1)
    land(g2)
    info = core.queue.info(key)
    assert info is not None and info.where == "unschedulable"
    land(cl.with_driver_answer(g1, nodes, ("node-a",)))  # g2 still unanswered
    info = core.queue.info(key)
    assert info is not None and info.where == "unschedulable"
    land(cl.with_driver_answer(g2, nodes, ("node-a",)))
    info = core.queue.info(key)
    assert info is not None and info.where == "backoff"
    step = core.schedule_next()  # nothing else to do: no wait for the backoff
    assert step is not None and step[1].node_reasons == ((WAIT_ALLOCATION, 1),)  # type: ignore[union-attr]
    assert sorted((w.op, w.name, w.node) for w in plugin.outbox if w.op == SELECT) == [
        (SELECT, "g1", "node-b"),
        (SELECT, "g2", "node-b"),
    ]
