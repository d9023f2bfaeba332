"""Device taint eviction (issue 23 item 4), pure: which pods a NoExecute device taint evicts, when,
and the DeviceTaintRule's ``EvictionInProgress`` condition (upstream ``devicetainteviction``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from draflow.events.api.meta import ObjectMeta
from draflow.events.api.resource_v1 import (
    Device,
    DeviceTaint,
    DeviceTaintRule,
    DeviceTaintRuleSpec,
    DeviceTaintSelector,
    DeviceToleration,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)
from draflow.services.device_taint_eviction import claim_eviction, plan_evictions, rule_condition
from draflow.services.device_taint_eviction.planner import Pools
from tests.builders import make_allocation, make_claim, make_pod

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
STAMP = "2026-03-01T12:00:00Z"
DRIVER = "gpu.example.com"


def slice_(*devices: Device, generation: int = 1, name: str = "node-1-gpu") -> ResourceSlice:
    return ResourceSlice(
        metadata=ObjectMeta(name=name),
        spec=ResourceSliceSpec(
            driver=DRIVER,
            node_name="node-1",
            pool=ResourcePool(name="node-1", generation=generation),
            devices=devices,
        ),
    )


def device(name: str, *taints: DeviceTaint) -> Device:
    return Device(name=name, taints=taints)


def taint(effect: str = "NoExecute", key: str = "example.com/broken", at: str | None = STAMP) -> DeviceTaint:
    return DeviceTaint(key=key, value="yes", effect=effect, time_added=at)


def rule(
    name: str = "evict",
    *,
    effect: str = "NoExecute",
    device_name: str | None = None,
    selector: bool = True,
    generation: int = 1,
) -> DeviceTaintRule:
    sel = DeviceTaintSelector(driver=DRIVER, pool="node-1", device=device_name) if selector else None
    return DeviceTaintRule(
        metadata=ObjectMeta(name=name, uid=f"uid-{name}", generation=generation),
        spec=DeviceTaintRuleSpec(device_selector=sel, taint=taint(effect, key="test.example.com/evict")),
    )


def running(name: str = "pod", claim: str = "claim", namespace: str = "default"):
    return make_pod(name, namespace=namespace, claims={"gpu": claim}, node_name="node-1", phase="Running")


def claim(
    name: str = "claim",
    dev: str = "gpu-0",
    *,
    tolerations: tuple[DeviceToleration, ...] = (),
    pods=("pod",),
    namespace: str = "default",
):
    alloc = make_allocation(("gpu", dev))
    if tolerations:
        (r,) = alloc.devices.results
        r = msgspec.structs.replace(r, tolerations=tolerations)
        alloc = msgspec.structs.replace(alloc, devices=msgspec.structs.replace(alloc.devices, results=(r,)))
    return make_claim(name, namespace=namespace, allocation=alloc, reserved_for=pods)


def test_a_slice_taint_not_tolerated_evicts_at_once() -> None:
    slices = [slice_(device("gpu-0", taint()))]
    plan = plan_evictions([running()], [claim()], slices, [], T0)
    (ev,) = plan.due
    assert (ev.namespace, ev.name, ev.uid, ev.when) == ("default", "pod", "uid-pod", T0)
    assert [str(r) for r in ev.reasons] == ["ResourceSlice node-1-gpu gpu.example.com/node-1/gpu-0 taint #0"]
    assert not plan.scheduled


def test_other_effects_and_other_devices_do_not_evict() -> None:
    slices = [slice_(device("gpu-0", taint("NoSchedule"), taint("None")), device("gpu-1", taint()))]
    assert plan_evictions([running()], [claim()], slices, [], T0) == plan_evictions([], [], [], [], T0)


def test_only_no_execute_tolerations_count_and_toleration_seconds_delay() -> None:
    slices = [slice_(device("gpu-0", taint()))]
    # a toleration without an effect tolerates the taint for scheduling, not against eviction
    all_effects = (DeviceToleration(operator="Exists"),)
    assert plan_evictions([running()], [claim(tolerations=all_effects)], slices, [], T0).due
    forever = (DeviceToleration(operator="Exists", effect="NoExecute"),)
    assert not plan_evictions(
        [running()], [claim(tolerations=forever)], slices, [], T0 + timedelta(days=9)
    ).due
    for_a_minute = (
        DeviceToleration(operator="Exists", effect="NoExecute", toleration_seconds=60),
        DeviceToleration(
            key="example.com/broken", operator="Exists", effect="NoExecute", toleration_seconds=30
        ),
    )
    plan = plan_evictions(
        [running()], [claim(tolerations=for_a_minute)], slices, [], T0 + timedelta(seconds=29)
    )
    (later,) = plan.scheduled
    assert later.when == T0 + timedelta(seconds=30) and plan.next_due == later.when  # the smallest
    assert plan_evictions([running()], [claim(tolerations=for_a_minute)], slices, [], later.when).due


def test_a_rule_taints_the_devices_it_selects() -> None:
    slices = [slice_(device("gpu-0"), device("gpu-1"))]
    pods = [running("a", "ca"), running("b", "cb", namespace="other")]
    claims = [claim("ca", "gpu-0", pods=("a",)), claim("cb", "gpu-1", pods=("b",), namespace="other")]
    plan = plan_evictions(pods, claims, slices, [rule()], T0)
    assert sorted(e.name for e in plan.due) == ["a", "b"]
    assert plan.pending == {"uid-evict": (2, 2)}
    only_one = plan_evictions(pods, claims, slices, [rule(device_name="gpu-1")], T0)
    assert [e.name for e in only_one.due] == ["b"]
    assert not plan_evictions(pods, claims, slices, [rule(selector=False)], T0).due  # no selector: nothing
    assert not plan_evictions(pods, claims, slices, [rule(effect="NoSchedule")], T0).due


def test_which_pods_are_left_alone() -> None:
    slices = [slice_(device("gpu-0", taint()))]
    unbound = make_pod("pod", claims={"gpu": "claim"})
    done = make_pod("pod", claims={"gpu": "claim"}, node_name="node-1", phase="Succeeded")
    deleting = make_pod("pod", claims={"gpu": "claim"}, node_name="node-1", phase="Running", deleting=True)
    for pod in (unbound, done, deleting):
        assert not plan_evictions([pod], [claim()], slices, [], T0).due
    # not in reservedFor (another pod of that name, say): not this claim's user
    assert not plan_evictions([running()], [claim(pods=())], slices, [], T0).due
    # an older pool generation is out of date
    stale = slice_(device("gpu-0", taint()), generation=1, name="old")
    current = slice_(device("gpu-0"), generation=2, name="new")
    assert not plan_evictions([running()], [claim()], [stale, current], [], T0).due


def test_claim_eviction_takes_the_earliest_taint() -> None:
    early = taint(key="a", at="2026-03-01T11:00:00Z")
    late = taint(key="b", at="2026-03-01T11:30:00Z")
    pools = Pools([slice_(device("gpu-0", late, early))])
    ev = claim_eviction(claim(), pools, [])
    assert ev is not None and ev.when == datetime(2026, 3, 1, 11, 0, tzinfo=UTC) and len(ev.reasons) == 2
    assert claim_eviction(make_claim("unallocated"), pools, []) is None


def _condition(r: DeviceTaintRule, plan, evicted: int = 0, **objs):
    return rule_condition(
        r,
        plan,
        evicted,
        pods=objs.get("pods", []),
        claims=objs.get("claims", []),
        slices=objs.get("slices", []),
        now=T0,
    )


def test_rule_conditions_as_upstream_writes_them() -> None:
    slices = [slice_(device("gpu-0"), device("gpu-1"))]
    pods = [running("a", "ca"), running("b", "cb")]
    claims = [claim("ca", "gpu-0", pods=("a",)), claim("cb", "gpu-1", pods=("b",))]
    r = rule(generation=3)
    plan = plan_evictions(pods, claims, slices, [r], T0)
    c = _condition(r, plan)
    assert (c.type, c.status, c.reason, c.message, c.observed_generation) == (
        "EvictionInProgress",
        "True",
        "PodsPendingEviction",
        "2 pods need to be evicted in 1 namespace.",
        3,
    )
    done = plan_evictions([], claims, slices, [r], T0)
    c = _condition(r, done, evicted=1)
    assert (c.status, c.reason, c.message) == (
        "False",
        "Completed",
        "1 pod evicted since starting the controller.",
    )
    c = _condition(r, done)
    assert (c.status, c.reason, c.message) == ("False", "NotStarted", "")
    c = _condition(rule(effect="NoSchedule"), done)
    assert (c.reason, c.message) == ("OtherEffect", "Eviction only happens for the NoExecute effect.")
    c = _condition(rule(effect="None"), done, pods=pods, claims=claims, slices=slices)
    assert (c.status, c.reason) == ("False", "NoEffect")
    assert c.message == (
        "2 published devices selected. 2 allocated devices selected. 2 pods would be evicted in 1 namespace "
        "if the effect was NoExecute. This information will not be updated again. Recreate the "
        "DeviceTaintRule to trigger an update."
    )
