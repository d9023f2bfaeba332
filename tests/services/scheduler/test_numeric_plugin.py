"""``NumericResources`` on the pure scheduling core: joint fit, Reserve/forget, allocated claims
on their node, PostFilter reallocation, immediate claims kept, template errors as asks."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api.classic_pod import decode_manifest
from draflow.events.api.core_v1 import Pod
from draflow.events.numeric import NumericClaimAllocated
from draflow.projections.numeric import REDUCERS
from draflow.services.dra.classic.validation import admit_classic
from draflow.services.scheduler.framework import Reserved, Scheduler, Unschedulable
from draflow.services.scheduler.plugins.numeric import NumericResources
from tests.builders import make_node
from tests.builders.numeric import kep_pod, node_capacity, numeric_claim, numeric_class
from tests.builders.scheduler import cluster, next_result

pytestmark = pytest.mark.kep4381

TEMPLATE = (
    "kind: Parameters\napiVersion: counter.dra.config.k8s.io/v1alpha1\n"
    "Required: {{has(object.spec) ? object.spec.numberOfFrobnicators : 2}}\n"
)


def decoded(manifest: dict[str, Any]) -> Any:
    obj = decode_manifest(manifest)
    return (
        admit_classic(obj)
        if isinstance(obj, cv.ResourceClaim | cv.ResourceClass | nv.NodeResourceCapacity)
        else obj
    )


def setup(nodes: dict[str, int], template: str = TEMPLATE) -> tuple[Scheduler, NumericResources]:
    core = cluster(*[make_node(n) for n in nodes])
    plugin = next(p for p in core.profile.plugins if isinstance(p, NumericResources))
    plugin.books.upsert_class(decoded(numeric_class(template=template)))
    for node, count in nodes.items():
        plugin.books.upsert_capacity(decoded(node_capacity(node, count)))
    return core, plugin


def add_claim(plugin: NumericResources, name: str, **kw: Any) -> cv.ResourceClaim:
    manifest = numeric_claim(name, "unused", **kw)
    del manifest["spec"]["parametersRef"]  # the template's default applies
    claim = decoded(manifest)
    claim = msgspec.structs.replace(
        claim, metadata=msgspec.structs.replace(claim.metadata, uid=f"uid-{name}")
    )
    plugin.books.upsert_claim(claim)
    return claim


def add_pod(core: Scheduler, name: str, claim: str) -> Pod:
    pod = decode_manifest(kep_pod(name, claim))
    assert isinstance(pod, Pod)
    pod = msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, uid=f"uid-{name}"))
    core.observe(pod)
    return pod


def allocate(plugin: NumericResources, claim: cv.ResourceClaim, result: Reserved) -> cv.ResourceClaim:
    """What the saga's PreBind writes, folded as the log would."""
    (plan,) = [p for p in result.numeric if p.name == claim.metadata.name]
    assert plan.allocation is not None
    new = REDUCERS[NumericClaimAllocated](
        claim, NumericClaimAllocated(allocation=plan.allocation, consumer=plan.consumer)
    )
    plugin.books.upsert_claim(new)
    return new


def test_fit_reserve_and_assumed_capacity() -> None:
    core, plugin = setup({"node-1": 3})
    a = add_claim(plugin, "a")
    add_claim(plugin, "b")
    add_pod(core, "pa", "a")
    add_pod(core, "pb", "b")
    first = next_result(core)
    assert isinstance(first, Reserved) and first.node_name == "node-1"
    (plan,) = first.numeric
    assert plan.allocation is not None and plan.allocation.data == {"instance": "frob-0", "count": 2}
    assert plan.ledger is not None and (plan.ledger.node, plan.ledger.counted) == ("node-1", ())
    # the second pod's cycle counts the first decision, which the log does not show yet
    second = next_result(core)
    assert isinstance(second, Unschedulable)
    assert "insufficient counter capacity: 2 required" in second.message
    # the saga compensated: the capacity is free again
    assert plugin.books.counted("node-1", "frobnicator.example.com") == (a.metadata.uid,)
    core.unreserve(add_pod(core, "pa", "a"))
    assert plugin.books.controllers["counter.dra.config.k8s.io"].allocations == {}
    assert plugin.books.counted("node-1", "frobnicator.example.com") == ()


def test_allocated_claim_stays_on_its_node_and_postfilter_frees_it() -> None:
    core, plugin = setup({"node-1": 4, "node-2": 4})
    claim = add_claim(plugin, "c")
    add_pod(core, "first", "c")
    result = next_result(core)
    assert isinstance(result, Reserved)
    allocated = allocate(plugin, claim, result)
    node = result.node_name
    # the pod went away, the claim (delayed) is unused; a new pod that cannot run there
    released = msgspec.structs.replace(
        allocated, status=msgspec.structs.replace(allocated.status, reserved_for=())
    )
    plugin.books.upsert_claim(released)
    core.observe(
        msgspec.structs.replace(
            make_node(node), spec=msgspec.structs.replace(make_node(node).spec, unschedulable=True)
        )
    )
    add_pod(core, "second", "c")
    out = next_result(core)
    assert isinstance(out, Unschedulable)
    assert out.deallocate_numeric is not None and out.deallocate_numeric.name == "c"
    assert "deallocation of numeric ResourceClaim default/c requested" in out.post_filter_message


def test_immediate_claims_are_not_reallocated() -> None:
    core, plugin = setup({"node-1": 4, "node-2": 4})
    claim = add_claim(plugin, "i", mode="Immediate")
    add_pod(core, "first", "i")
    result = next_result(core)
    assert isinstance(result, Reserved)
    allocated = allocate(plugin, claim, result)
    released = msgspec.structs.replace(
        allocated, status=msgspec.structs.replace(allocated.status, reserved_for=())
    )
    plugin.books.upsert_claim(released)
    node = result.node_name
    core.observe(
        msgspec.structs.replace(
            make_node(node), spec=msgspec.structs.replace(make_node(node).spec, unschedulable=True)
        )
    )
    add_pod(core, "second", "i")
    out = next_result(core)
    assert isinstance(out, Unschedulable) and out.deallocate_numeric is None


def test_template_error_is_an_ask_and_unresolvable() -> None:
    broken = "kind: Parameters\napiVersion: counter.dra.config.k8s.io/v1alpha1\nRequired: {{object.nope}}\n"
    core, plugin = setup({"node-1": 4}, template=broken)
    add_claim(plugin, "c")
    add_pod(core, "p", "c")
    out = next_result(core)
    assert isinstance(out, Unschedulable)
    assert (
        "resourceclaim c: class frob, template for frobnicator.example.com/v1alpha1/ClaimParameters"
        in out.message
    )
    (ask,) = plugin.outbox
    assert ask.name == "c" and ask.condition.type == "NumericParameters"
    assert ask.condition.message.startswith("class frob, template for")
