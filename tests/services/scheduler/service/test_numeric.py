"""Numeric claims (KEP-4381) through the real apiserver, scheduler instances and claim controller
on a real JetStream: allocation without a driver controller, two schedulers racing for one node's
capacity, deallocation, immediate claims, capacity shrink and template errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import yaml

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api.codec import encode_object
from draflow.events.api.core_v1 import Pod
from draflow.events.numeric import (
    NUMERIC_FINALIZER,
    NumericClaimDeallocated,
    NumericClaimReservationsReleased,
)
from draflow.infra.config import Settings
from draflow.services.claim_controller.service import ClaimControllerService
from draflow.services.cli.describe import describe_object
from draflow.services.cli.explain import collect, render
from draflow.services.cli.verify import verify_records
from draflow.services.dra.numeric import counter
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers.frobnicator.node import FrobnicatorNodePlugin
from draflow.services.drivers.kubeletplugin.server import PluginServer
from draflow.services.kubelet.classic_host import ClassicKubelet
from draflow.services.kubelet.plugins.capacity import CapacityWatcher
from draflow.services.kubelet.plugins.registry import PluginRegistry
from draflow.services.kubelet.plugins.watcher import RegistrationWatcher
from draflow.services.kubelet.service import KubeletService
from draflow.services.runtime.kubeletapi import sockets
from draflow.services.scheduler.framework.config import SchedulerConfig
from tests.builders import make_node
from tests.builders.numeric import frob_parameters, kep_pod, node_capacity, numeric_claim, numeric_class
from tests.helpers import assert_eventually
from tests.paths import ROOT
from tests.services.scheduler.service.conftest import Cluster
from tests.shells import run

pytestmark = pytest.mark.kep4381

EXAMPLES = ROOT / "examples" / "numeric"


async def apply(cluster: Cluster, *manifests: dict[str, Any]) -> None:
    results = await cluster.api.apply(list(manifests))
    errors = [r.error for r in results if r.error is not None]
    assert not errors, errors


def example(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


async def setup(cluster: Cluster, nodes: int, count: int, template: str | None = None) -> None:
    """The ClaimParameters CRD of examples/numeric, the class, nodes with their capacity."""
    await apply(cluster, *example("claim-parameters-crd.yaml"))
    cls = numeric_class() if template is None else numeric_class(template=template)
    objs: list[dict[str, Any]] = [cls]
    for i in range(nodes):
        objs += [encode_object(make_node(f"node-{i}")), node_capacity(f"node-{i}", count)]
    await apply(cluster, *objs)


async def parameters(cluster: Cluster, name: str, count: int) -> None:
    await apply(cluster, frob_parameters(name, count))


async def claim(cluster: Cluster, name: str) -> cv.ResourceClaim:
    obj = await cluster.api.get_object(cv.CLAIM_KIND, name, namespace="default")
    assert isinstance(obj, cv.ResourceClaim)
    return obj


async def pod(cluster: Cluster, name: str) -> Pod:
    obj = await cluster.api.get_object("Pod", name, namespace="default")
    assert isinstance(obj, Pod)
    return obj


async def test_the_keps_example_pod_gets_three_frobnicators(cluster: Cluster) -> None:
    await setup(cluster, nodes=1, count=8)
    await parameters(cluster, "three", 3)
    await apply(cluster, numeric_claim("frob-3", "three"), kep_pod("p", "frob-3"))
    await cluster.start()

    async def bound() -> bool:
        return bool((await pod(cluster, "p")).spec.node_name)

    await assert_eventually(bound, timeout_s=15)
    c = await claim(cluster, "frob-3")
    alloc = c.status.numeric_allocation
    assert alloc is not None and c.status.phase == cv.ALLOCATED
    assert alloc.data == {"instance": "frob-0", "count": 3}
    assert (alloc.node_name, alloc.driver_name) == ("node-0", "frobnicator.example.com")
    assert alloc.parameters["spec"]["numberOfFrobnicators"] == 3  # the parameter object, embedded
    assert alloc.resource_class["metadata"]["name"] == "frob"  # and the class
    assert NUMERIC_FINALIZER in c.metadata.finalizers
    p = await pod(cluster, "p")
    assert [u.uid for u in c.status.reserved_for] == [p.metadata.uid]
    # draflow explain tells the numeric claim's story from the log
    text = render(await collect(cluster.store, "default", "p", None))
    assert (
        "allocated (numeric, class frob) counter.dra.config.k8s.io Allocation "
        "{instance: frob-0, count: 3} on node-0, reserved for pods/p"
    ) in text
    assert "numeric claims: frob-3 counter.dra.config.k8s.io Allocation {instance: frob-0, count: 3}" in text
    # draflow describe shows the allocation, with the class and parameter object it embeds
    described = describe_object(encode_object(c), [])
    assert "Kind:         ResourceClaim" in described
    for line in ("Numeric Allocation:", "Node Name:    node-0", "Number Of Frobnicators:  3", "Count:     3"):
        assert line in described, described


async def test_two_schedulers_racing_never_over_commit(cluster: Cluster) -> None:
    """One node with 4 frobnicators; each of two scheduler instances has its own pods (by
    ``schedulerName``) wanting 3 each, so both decide for the same node from the same snapshot at
    once: only one of those decisions may land, whichever instance wins."""
    await setup(cluster, nodes=1, count=4)
    await parameters(cluster, "three", 3)
    names = [f"{s}{i}" for s in "ab" for i in range(3)]
    for n in names:
        await apply(
            cluster, numeric_claim(f"{n}-frob", "three"), kep_pod(n, f"{n}-frob", scheduler=f"sched-{n[0]}")
        )
    a = await cluster.make("sched-a", config=SchedulerConfig(scheduler_name="sched-a"))
    b = await cluster.make("sched-b", config=SchedulerConfig(scheduler_name="sched-b"))
    await a.start()
    await b.start()
    cluster.run(a)
    cluster.run(b)

    async def settled() -> bool:
        decided = sum(s.outcomes["completed"] + s.outcomes["compensated"] for s in (a, b))
        return decided >= 2 and a.outcomes["unschedulable"] > 0 and b.outcomes["unschedulable"] > 0

    await assert_eventually(settled, timeout_s=30)
    bound = [p for p in [await pod(cluster, n) for n in names] if p.spec.node_name]
    used = 0
    for n in names:
        alloc = (await claim(cluster, f"{n}-frob")).status.numeric_allocation
        if alloc is not None:
            used += alloc.data["count"]
    assert len(bound) == 1 and used == 3, (len(bound), used)
    await cluster.stop_all()
    # verify-replay re-decides every decision of both instances, numeric plans included
    records = [r async for batch in cluster.store.read_raw() for r in batch]
    verifier, divergence = verify_records(records, cluster.store.root)
    assert divergence is None, divergence
    assert verifier.checked["schedule"] >= 2 and verifier.checked["unschedulable"] >= 2


async def test_deallocation_frees_capacity_and_immediate_claims_stay(
    cluster: Cluster, settings: Settings
) -> None:
    await setup(cluster, nodes=1, count=4)
    await parameters(cluster, "three", 3)
    await apply(
        cluster,
        numeric_claim("delayed", "three"),
        numeric_claim("immediate", "three", mode="Immediate"),
        kep_pod("first", "delayed"),
    )
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    try:
        await cluster.start()

        async def bound(name: str) -> bool:
            return bool((await pod(cluster, name)).spec.node_name)

        await assert_eventually(lambda: bound("first"), timeout_s=15)
        # KEP "Immediate allocation": no driver controller, so allocated only once a pod needs it
        assert (await claim(cluster, "immediate")).status.numeric_allocation is None
        # the node is full: the immediate claim's pod waits
        await apply(cluster, kep_pod("second", "immediate"))
        await cluster.api.delete([("Pod", "default", "first")], grace_period_seconds=0)

        async def delayed_freed() -> bool:
            c = await claim(cluster, "delayed")
            return c.status.numeric_allocation is None and NUMERIC_FINALIZER not in c.metadata.finalizers

        await assert_eventually(delayed_freed, timeout_s=20)
        await assert_eventually(lambda: bound("second"), timeout_s=20)
        await cluster.api.delete([("Pod", "default", "second")], grace_period_seconds=0)

        async def released() -> bool:
            return not (await claim(cluster, "immediate")).status.reserved_for

        await assert_eventually(released, timeout_s=20)
        kept = await claim(cluster, "immediate")
        assert kept.status.numeric_allocation is not None  # immediate: stays allocated
    finally:
        await ctl.stop()


async def test_a_broken_template_is_reported_on_claim_and_pod(cluster: Cluster) -> None:
    broken = (
        "kind: Parameters\napiVersion: counter.dra.config.k8s.io/v1alpha1\nRequired: {{object.spec.count}}\n"
    )
    await setup(cluster, nodes=1, count=4, template=broken)
    await parameters(cluster, "three", 3)
    await apply(cluster, numeric_claim("c", "three"), kep_pod("p", "c"))
    await cluster.start()
    expected = (
        "class frob, template for frobnicator.example.com/v1alpha1/ClaimParameters: "
        "{{object.spec.count}}: no such key: count"
    )

    async def condition() -> str:
        conds = (await claim(cluster, "c")).status.conditions
        assert conds, "no condition yet"
        return conds[0].message

    assert (await assert_eventually(condition, timeout_s=15)).startswith(expected)

    async def pod_condition() -> str:
        conds = [c for c in (await pod(cluster, "p")).status.conditions if c.type == "PodScheduled"]
        assert conds, "not tried yet"
        return conds[0].message

    message = await assert_eventually(pod_condition, timeout_s=15)
    assert f"resourceclaim c: {expected}" in message
    events, _ = await cluster.api.list("Event", namespace="default")
    assert any(e["reason"] == "FailedScheduling" and expected in e["message"] for e in events)


async def test_capacity_shrink_keeps_allocations_and_blocks_new_ones(cluster: Cluster) -> None:
    await setup(cluster, nodes=1, count=4)
    await parameters(cluster, "three", 3)
    await parameters(cluster, "one", 1)
    await apply(cluster, numeric_claim("big", "three"), kep_pod("big", "big"))
    await cluster.start()

    async def bound(name: str) -> bool:
        return bool((await pod(cluster, name)).spec.node_name)

    await assert_eventually(lambda: bound("big"), timeout_s=15)
    await apply(cluster, node_capacity("node-0", 2))  # the driver lost frobnicators
    await apply(cluster, numeric_claim("small", "one"), kep_pod("small", "small"))

    async def unschedulable() -> str:
        conds = [c for c in (await pod(cluster, "small")).status.conditions if c.type == "PodScheduled"]
        assert conds, "not tried yet"
        return conds[0].message

    assert "insufficient counter capacity: 1 required" in await assert_eventually(unschedulable, timeout_s=15)
    assert (await claim(cluster, "big")).status.numeric_allocation is not None
    await apply(cluster, node_capacity("node-0", 8))  # back: the waiting pod fits again
    await assert_eventually(lambda: bound("small"), timeout_s=15)


async def test_the_keps_example_with_the_real_crd(cluster: Cluster) -> None:
    """The ClaimParameters CRD of examples/numeric served by the apiserver: a custom object is the
    claim's parameter object (read generically by group, kind, namespace and name), defaults and
    bounds come from the CRD's schema."""
    await apply(cluster, *example("claim-parameters-crd.yaml"), *example("class.yaml"))
    await apply(cluster, encode_object(make_node("node-0")), node_capacity("node-0", 4))
    results = await cluster.api.apply(
        [d for d in yaml.safe_load_all((EXAMPLES / "too-many.yaml").read_text()) if d]
    )
    assert results[0].error is not None
    refusal = (
        "spec.numberOfFrobnicators: Invalid value: 17: "
        "spec.numberOfFrobnicators in body should be less than or equal to 16"
    )
    assert refusal in results[0].error.message
    defaulted = {
        "apiVersion": "frobnicator.example.com/v1alpha1",
        "kind": "ClaimParameters",
        "metadata": {"name": "one", "namespace": "default"},
        "spec": {"env": {"A": "b"}},
    }
    three = {
        **defaulted,
        "metadata": {"name": "three", "namespace": "default"},
        "spec": {"numberOfFrobnicators": 3},
    }
    claim_one = numeric_claim("one", "one", cls="frobnicator")
    claim_three = numeric_claim("three", "three", cls="frobnicator")
    await apply(
        cluster, defaulted, three, claim_one, claim_three, kep_pod("p1", "one"), kep_pod("p3", "three")
    )
    await cluster.start()

    async def both_bound() -> bool:
        pods = [await pod(cluster, n) for n in ("p1", "p3")]
        assert all(p.spec.node_name for p in pods), [c.message for p in pods for c in p.status.conditions]
        return True

    await assert_eventually(both_bound, timeout_s=15)
    one, three_c = await claim(cluster, "one"), await claim(cluster, "three")
    assert one.status.numeric_allocation is not None and three_c.status.numeric_allocation is not None
    assert one.status.numeric_allocation.data["count"] == 1  # the CRD's default
    assert one.status.numeric_allocation.parameters["spec"] == {"numberOfFrobnicators": 1, "env": {"A": "b"}}
    assert three_c.status.numeric_allocation.data["count"] == 3


async def test_a_pod_whose_capacity_vanished_waits_until_it_returns(
    cluster: Cluster, settings: Settings
) -> None:
    """The node's frobnicators disappear after the scheduler allocated 3 of them: the kubelet
    republishes the smaller capacity, prepare's double check refuses the claim with a Warning and
    the pod waits; when the frobnicators are back, it runs."""
    await setup(cluster, nodes=0, count=0)
    await parameters(cluster, "three", 3)
    # what the kubelet published before the loss (the plugin's instance id)
    await apply(
        cluster, encode_object(make_node("node-1")), node_capacity("node-1", 4, instance="frobnicators")
    )
    await apply(cluster, numeric_claim("c", "three"), kep_pod("p", "c"))
    await cluster.start()

    async def bound() -> bool:
        return bool((await pod(cluster, "p")).spec.node_name)

    await assert_eventually(bound, timeout_s=15)
    # the node's frobnicator plugin, served over real sockets: it reads the claims it is asked
    # for from the API and streams its capacity; two frobnicators were lost
    plugin = FrobnicatorNodePlugin(
        node_name="node-1", node_labels={}, frobnicators=2, state_dir=settings.data_dir / "frob"
    )

    async def observe(refs: Sequence[ClaimRef]) -> None:
        for ref in refs:
            claim = await cluster.api.get_object(cv.CLAIM_KIND, ref.name, namespace=ref.namespace)
            assert isinstance(claim, cv.ResourceClaim)
            plugin.observe(claim)

    server = PluginServer(
        plugin,
        registry_dir=sockets.registry_dir(settings.data_dir, "node-1"),
        plugins_dir=sockets.plugins_dir(settings.data_dir, "node-1"),
        before_prepare=observe,
    )
    registry = PluginRegistry()
    numeric = CapacityWatcher(registry, lambda: None, retry_s=0.05, max_retry_s=0.2)
    watcher = RegistrationWatcher(sockets.registry_dir(settings.data_dir, "node-1"), registry)
    await server.start()
    await watcher.scan()
    numeric.reconcile()

    async def register(svc: KubeletService) -> None:
        numeric.on_change = svc.rt.kick
        await svc.register()

    kubelet, _ = await run(
        settings,
        "kubelet-node-1",
        lambda rt: KubeletService(
            rt,
            "node-1",
            settings.data_dir / "kubelet-node-1",
            registry,
            classic=ClassicKubelet("node-1", registry),
            numeric=numeric,
            retry_base_s=0.1,
            retry_max_s=0.3,
        ),
        before=register,
        resync_s=0.2,
    )
    try:

        async def warned() -> str:
            events, _ = await cluster.api.list("Event", namespace="default")
            found = [e["message"] for e in events if e["reason"] == "FailedPrepareDynamicResources"]
            assert found, "no warning yet"
            return str(found[-1])

        message = await assert_eventually(warned, timeout_s=15)
        assert (
            "resource claim default/c: 3 frobnicators allocated but only 2 of 2 are left on node-1" in message
        )

        async def published(count: int) -> bool:
            capacity = await cluster.api.get_object(nv.KIND, "node-1-frobnicator.example.com")
            assert isinstance(capacity, nv.NodeResourceCapacity)
            assert capacity.instances[0].data == {"count": count}
            return True

        await assert_eventually(lambda: published(2), timeout_s=15)  # from the plugin's stream
        assert (await pod(cluster, "p")).status.phase == "Pending"
        plugin.set_frobnicators(4)  # back: the stream says so, the kubelet republishes
        server.capacity_changed()
        await assert_eventually(lambda: published(4), timeout_s=15)

        async def running() -> bool:
            return (await pod(cluster, "p")).status.phase == "Running"

        await assert_eventually(running, timeout_s=15)
    finally:
        await kubelet.stop()
        await numeric.close()
        await server.stop(0.1)
        for instance in registry.instances():
            await instance.client.close()


async def test_postfilter_reallocates_an_unused_claim_allocated_where_the_pod_cannot_run(
    cluster: Cluster,
) -> None:
    """The claim was allocated on node-0 for a pod that is gone; the next pod cannot run on
    node-0 (cordoned): PostFilter asks for the numeric reallocation saga, which frees the claim,
    and the pod gets it allocated again on node-1."""
    await setup(cluster, nodes=2, count=4)
    await parameters(cluster, "three", 3)
    await apply(cluster, numeric_claim("c", "three"), kep_pod("first", "c"))
    await cluster.start()

    async def first_on() -> str:
        node = (await pod(cluster, "first")).spec.node_name
        assert node, "not bound"
        return node

    node = await assert_eventually(first_on, timeout_s=15)
    first = await pod(cluster, "first")
    await cluster.api.delete([("Pod", "default", "first")], grace_period_seconds=0)
    subject = cluster.store.subject(cv.CLAIM_KIND, "default", "c")
    await cluster.store.append(
        subject, NumericClaimReservationsReleased(uids=(first.metadata.uid,)), expected_last_seq=None
    )
    other = "node-1" if node == "node-0" else "node-0"
    await apply(cluster, encode_object(make_node(node, unschedulable=True)))
    await apply(cluster, kep_pod("second", "c"))

    async def second_on_other() -> bool:
        assert (await pod(cluster, "second")).spec.node_name == other, "not there yet"
        return True

    await assert_eventually(second_on_other, timeout_s=20)
    alloc = (await claim(cluster, "c")).status.numeric_allocation
    assert alloc is not None and alloc.node_name == other
    history = await cluster.store.events(subject)
    assert [e.data.reason for e in history if isinstance(e.data, NumericClaimDeallocated)] == ["Reallocate"]


async def test_a_shareable_claim_is_allocated_once_and_reserved_for_every_pod(cluster: Cluster) -> None:
    """``shareable`` in the class: the second pod reserves the allocated claim (NumericClaimReserved)
    instead of allocating again."""
    await apply(cluster, *example("claim-parameters-crd.yaml"))
    await apply(
        cluster, numeric_class(shareable=True), encode_object(make_node("node-0")), node_capacity("node-0", 4)
    )
    await parameters(cluster, "three", 3)
    await apply(cluster, numeric_claim("shared", "three"), kep_pod("a", "shared"), kep_pod("b", "shared"))
    await cluster.start()

    async def both_bound() -> bool:
        pods = [await pod(cluster, n) for n in ("a", "b")]
        assert all(p.spec.node_name == "node-0" for p in pods), "not bound yet"
        return True

    await assert_eventually(both_bound, timeout_s=15)
    c = await claim(cluster, "shared")
    assert c.status.user_limit == cv.UNLIMITED
    assert sorted(u.name for u in c.status.reserved_for) == ["a", "b"]
    history = await cluster.store.events(cluster.store.subject(cv.CLAIM_KIND, "default", "shared"))
    kinds = [type(e.data).__name__ for e in history]
    assert kinds.count("NumericClaimAllocated") == 1 and kinds.count("NumericClaimReserved") == 1


async def test_verify_replay_catches_a_changed_numeric_model(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify-replay re-decides numeric claims with today's model: a counter that would take one
    frobnicator more is a difference in the recorded decision's numeric plan."""
    await setup(cluster, nodes=1, count=8)
    await parameters(cluster, "three", 3)
    await apply(cluster, numeric_claim("c", "three"), kep_pod("p", "c"))
    await cluster.start()

    async def bound() -> bool:
        return bool((await pod(cluster, "p")).spec.node_name)

    await assert_eventually(bound, timeout_s=15)
    await cluster.stop_all()
    records = [r async for batch in cluster.store.read_raw() for r in batch]
    assert verify_records(records, cluster.store.root)[1] is None

    def greedy(self: Any, node: str, driver: str, requests: Any) -> list[counter.Allocation]:
        return [counter.Allocation(instance="frob-0", count=r.required + 1) for r in requests]

    monkeypatch.setattr(counter.CounterController, "allocate", greedy)
    _, divergence = verify_records(records, cluster.store.root)
    assert divergence is not None
    assert "'count': 4" in str(divergence) and "'count': 3" in str(divergence), str(divergence)
