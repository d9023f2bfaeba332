"""The scheduling core (default plugins, no I/O) with extended resources backed by DRA.

The KEP's Nodes (capacity only), DeviceClass and ResourceSlice go into ``Scheduler``; cycles are
run with ``schedule`` and their decisions assumed, as the service does between cycles.
"""

from __future__ import annotations

import msgspec
import pytest

from draflow.events.api.core_v1 import Node, Pod
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.resource_v1 import DeviceClass
from draflow.services.dra.extended import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from draflow.services.scheduler.framework import Reserved, Scheduler, SchedulingError, Unschedulable
from draflow.services.scheduler.plugins import default_plugins
from tests.builders import make_class, make_container, make_pod
from tests.builders.manifests import EXAMPLES, load
from tests.services.dra.extended.test_nodes import user_claim

pytestmark = pytest.mark.kep5004

GPU = "example.com/gpu"
DRA_NODE = "gke-drabeta-n1-standard-4-2xt4-346fe653-zrw2"
PLUGIN_NODE = "gke-drabeta-n1-standard-4-2xt4-346fe653-xyz8"


def _core(*extra: object) -> Scheduler:
    core = Scheduler(plugins=default_plugins())
    for name in ("deviceclass.yaml", "nodes.yaml", "resourceslice-runnable.yaml"):
        for obj in load(EXAMPLES / "extended-resources" / name):
            core.observe(obj)
    for obj in extra:
        core.observe(obj)
    return core


def _kep_pod(name: str) -> Pod:
    (dep,) = load(EXAMPLES / "extended-resources" / "deployment.yaml")
    spec = dep.spec.template.spec  # type: ignore[attr-defined]
    return Pod(metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"), spec=spec)


def _place(core: Scheduler, p: Pod) -> Reserved:
    result = core.schedule(p)
    assert isinstance(result, Reserved), result
    core.cluster.assume_pod(p, result.node_name)
    return result


def test_capacity_only_nodes_are_used_and_both_kinds_serve_the_deployment() -> None:
    core = _core()
    results = [_place(core, _kep_pod(f"demo-{i}")) for i in range(10)]
    by_node = {n: [r for r in results if r.node_name == n] for n in (DRA_NODE, PLUGIN_NODE)}
    assert (len(by_node[PLUGIN_NODE]), len(by_node[DRA_NODE])) == (2, 8)
    for r in by_node[PLUGIN_NODE]:
        assert r.extended is None and r.claims == ()
    devices = set()
    for r in by_node[DRA_NODE]:
        ext = r.extended
        assert ext is not None
        claim = ext.claim
        assert claim.metadata.annotations == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
        assert claim.metadata.name.startswith(f"{r.pod.name}-extended-resources-") and claim.metadata.uid
        (binding,) = r.claims
        assert (binding.claim.name, binding.claim.uid) == (claim.metadata.name, claim.metadata.uid)
        assert binding.allocation is not None and binding.consumer.uid == r.pod.uid
        (res,) = binding.allocation.devices.results
        devices.add(res.device)
    assert devices == {f"gpu-{i}" for i in range(8)}  # every special claim its own GPU
    # the cluster is full: the 11th pod is refused by both plugins, each on its node
    result = core.schedule(_kep_pod("demo-10"))
    assert isinstance(result, Unschedulable)
    assert (
        result.message
        == "0/2 nodes are available: 1 Insufficient example.com/gpu, 1 cannot allocate all claims."
    )
    assert result.unschedulable_plugins == {"NodeResourcesFit", "DynamicResources"}


def test_decisions_are_deterministic() -> None:
    def decide() -> list[tuple[str, str, str]]:
        core = _core()
        out = []
        for i in range(5):
            r = _place(core, _kep_pod(f"demo-{i}"))
            ext = r.extended
            out.append(
                (r.node_name, ext.claim.metadata.name if ext else "", ext.claim.metadata.uid if ext else "")
            )
        return out

    assert decide() == decide()


def test_leftover_devices_serve_an_ordinary_claim_next_to_the_special_one() -> None:
    core = _core()
    plugin_node = core.cluster.nodes[PLUGIN_NODE].node
    core.observe(
        msgspec.structs.replace(
            plugin_node, spec=msgspec.structs.replace(plugin_node.spec, unschedulable=True)
        )
    )
    first = _place(core, _kep_pod("demo-0"))
    assert first.node_name == DRA_NODE and first.extended is not None
    claim = user_claim("gpu.example.com", 7)
    core.observe(claim)
    user = make_pod("user", containers=(make_container("c"),))
    user = msgspec.structs.replace(
        user,
        spec=msgspec.structs.replace(
            user.spec,
            resource_claims=(
                msgspec.convert({"name": "g", "resourceClaimName": "gpus"}, type=_pod_claim_type()),
            ),
        ),
    )
    r = _place(core, user)
    (binding,) = r.claims
    assert binding.allocation is not None
    taken = {x.device for x in binding.allocation.devices.results}
    (special,) = first.claims
    assert special.allocation is not None
    assert taken | {special.allocation.devices.results[0].device} == {f"gpu-{i}" for i in range(8)}
    assert len(taken) == 7


def _pod_claim_type() -> type:
    from draflow.events.api.core_v1 import PodResourceClaim

    return PodResourceClaim


def test_unmapped_extended_resource_does_not_fit_anywhere() -> None:
    core = _core()
    result = core.schedule(
        make_pod("fpga", containers=(make_container("c", requests={"example.com/fpga": 1}),))
    )
    assert isinstance(result, Unschedulable)
    assert result.message.startswith("0/2 nodes are available: 2 Insufficient example.com/fpga."), (
        result.message
    )


def test_implicit_name_and_newest_class_win() -> None:
    newer = make_class("gpu-new", selectors=(), extended_resource_name=GPU, created="2030-01-01T00:00:00Z")
    newer = msgspec.structs.replace(
        newer, spec=msgspec.structs.replace(newer.spec, selectors=_kep_selectors())
    )
    core = _core(newer)
    plugin_node = core.cluster.nodes[PLUGIN_NODE].node
    core.observe(
        msgspec.structs.replace(
            plugin_node, spec=msgspec.structs.replace(plugin_node.spec, unschedulable=True)
        )
    )
    r = _place(core, _kep_pod("demo-0"))
    assert r.extended is not None
    (req,) = r.extended.claim.spec.devices.requests
    assert req.exactly is not None and req.exactly.device_class_name == "gpu-new"
    implicit = make_pod(
        "imp",
        containers=(make_container("c", limits={"deviceclass.resource.kubernetes.io/gpu.example.com": 2}),),
    )
    r2 = _place(core, implicit)
    assert r2.extended is not None
    (req2,) = r2.extended.claim.spec.devices.requests
    assert req2.exactly is not None and (req2.exactly.device_class_name, req2.exactly.count) == (
        "gpu.example.com",
        2,
    )


def _kep_selectors() -> tuple[object, ...]:
    (dc,) = load(EXAMPLES / "extended-resources" / "deviceclass.yaml")
    assert isinstance(dc, DeviceClass)
    return tuple(dc.spec.selectors)


def test_129_devices_is_a_scheduling_error() -> None:
    core = _core()
    result = core.schedule(make_pod("big", containers=(make_container("c", limits={GPU: 129}),)))
    assert isinstance(result, SchedulingError) and result.plugin == "DynamicResources"
    assert result.message == (
        'running "DynamicResources" filter plugin: '
        "pod default/big: extended resources backed by DRA: number of requested devices 129 "
        "exceeds the claim limit of 32"
    )


def test_node_without_allocatable_uses_capacity() -> None:
    core = _core()
    result = core.schedule(make_pod("cpu", containers=(make_container("c", requests={"cpu": "5"}),)))
    assert isinstance(result, Unschedulable)
    assert "2 Insufficient cpu" in result.message
    assert isinstance(core.cluster.nodes[DRA_NODE].node, Node)
    assert core.cluster.nodes[DRA_NODE].allocatable["cpu"] == 4000


def test_deleted_claim_requeues_its_owner_or_everyone_when_it_held_devices() -> None:
    from draflow.events.api.resource_v1 import ResourceClaimStatus
    from draflow.services.dra.extended import new_in_memory_claim
    from draflow.services.scheduler.framework import ActionType, ClusterEvent, EventResource, QueueingHint
    from draflow.services.scheduler.plugins.dynamicresources.events import special_claim_deleted_hint

    core = _core()
    plugin_node = core.cluster.nodes[PLUGIN_NODE].node
    core.observe(
        msgspec.structs.replace(
            plugin_node, spec=msgspec.structs.replace(plugin_node.spec, unschedulable=True)
        )
    )
    owner, other = _kep_pod("owner"), _kep_pod("other")
    stale = new_in_memory_claim(owner)

    def hint(p: Pod, claim: object) -> QueueingHint:
        event = ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.DELETE, claim, None)
        return special_claim_deleted_hint(p, event, core.cluster)

    assert hint(owner, stale) is QueueingHint.QUEUE
    assert hint(other, stale) is QueueingHint.SKIP
    r = _place(core, _kep_pod("holder"))
    assert r.extended is not None and r.claims[0].allocation is not None
    held = msgspec.structs.replace(
        r.extended.claim, status=ResourceClaimStatus(allocation=r.claims[0].allocation)
    )
    assert hint(other, held) is QueueingHint.QUEUE  # its devices came free
    assert hint(other, user_claim("gpu.example.com", 1)) is QueueingHint.SKIP
