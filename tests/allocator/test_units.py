"""Unit tests for the allocator's pieces: node selectors, tolerations, capacity policies, pools, budgets."""

from __future__ import annotations

import pytest

from events.api.meta import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from events.api.resource_v1 import (
    CapacityRequestPolicy,
    CapacityRequestPolicyRange,
    DeviceCapacity,
    DeviceConstraint,
    DeviceTaint,
    DeviceTaintRule,
    DeviceTaintRuleSpec,
    DeviceTaintSelector,
    DeviceToleration,
)
from events.quantity import Quantity
from services.dra.structured import (
    AllocatedState,
    AllocationTimeout,
    Allocator,
    InvalidInputError,
    NodeAllocationError,
    SliceCache,
    apply_taint_rules,
    seeded_share_ids,
)
from services.dra.structured.capacity import consumed_amount, violates_policy
from services.dra.structured.model import Features
from services.dra.structured.nodeselector import (
    CompiledNodeSelector,
    NodeSelectorParseError,
    merge_result_selector,
)
from services.dra.structured.prepared import CapacitySpec
from services.dra.structured.selection import tolerates
from tests.allocator.builders import claim, device, device_class, label_selector, node, request, slice_

# -- node selectors ---------------------------------------------------------------------------------

LABELS = {"region": "r1", "gpus": "8", "planet": "earth"}


@pytest.mark.parametrize(
    ("reqs", "expected"),
    [
        ((("region", "In", ("r1", "r2")),), True),
        ((("region", "In", ("r2",)),), False),
        ((("region", "NotIn", ("r2",)),), True),
        ((("zone", "NotIn", ("a",)),), True),  # absent label satisfies NotIn
        ((("zone", "Exists", ()),), False),
        ((("zone", "DoesNotExist", ()),), True),
        ((("gpus", "Gt", ("7",)),), True),
        ((("gpus", "Gt", ("8",)),), False),
        ((("gpus", "Lt", ("9",)),), True),
        ((("region", "Gt", ("1",)),), False),  # non-integer label never compares
        ((("region", "In", ("r1",)), ("planet", "In", ("mars",))), False),  # ANDed
    ],
)
def test_label_requirements(reqs: tuple[tuple[str, str, tuple[str, ...]], ...], expected: bool) -> None:
    assert CompiledNodeSelector(label_selector(*reqs)).matches("n1", LABELS) is expected


def test_terms_are_ored_and_empty_terms_never_match() -> None:
    sel = NodeSelector(
        node_selector_terms=(
            NodeSelectorTerm(),
            NodeSelectorTerm(
                match_fields=(NodeSelectorRequirement(key="metadata.name", operator="In", values=("n1",)),)
            ),
        )
    )
    compiled = CompiledNodeSelector(sel)
    assert compiled.matches("n1", {})
    assert not compiled.matches("n2", {})
    assert not CompiledNodeSelector(NodeSelector(node_selector_terms=(NodeSelectorTerm(),))).matches("n1", {})


@pytest.mark.parametrize(
    ("key", "op", "values"),
    [
        ("region", "Bogus", ("a",)),
        ("region", "In", ()),
        ("region", "Exists", ("a",)),
        ("gpus", "Gt", ("x",)),
        ("gpus", "Lt", ("1", "2")),
        ("bad key!", "In", ("a",)),
    ],
)
def test_malformed_selectors_raise_when_used(key: str, op: str, values: tuple[str, ...]) -> None:
    compiled = CompiledNodeSelector(label_selector((key, op, values)))
    with pytest.raises(NodeSelectorParseError):
        compiled.matches("n1", LABELS)


def test_field_selector_only_supports_in_and_notin_with_one_value() -> None:
    req = NodeSelectorRequirement(key="metadata.name", operator="Exists")
    compiled = CompiledNodeSelector(
        NodeSelector(node_selector_terms=(NodeSelectorTerm(match_fields=(req,)),))
    )
    with pytest.raises(NodeSelectorParseError):
        compiled.matches("n1", {})


def test_result_selector_merges_one_term_selectors_without_duplicates() -> None:
    a = label_selector(("region", "In", ("r1", "r2")))
    b = label_selector(("region", "In", ("r2", "r1")), ("planet", "Exists", ()))
    merged = merge_result_selector([a, b])
    assert merged is not None
    term = merged.node_selector_terms[0]
    assert [(r.key, r.operator) for r in term.match_expressions] == [("region", "In"), ("planet", "Exists")]
    assert merge_result_selector([]) is None
    two = NodeSelector(node_selector_terms=(*a.node_selector_terms, *b.node_selector_terms))
    with pytest.raises(ValueError, match="2 terms"):
        merge_result_selector([two])


# -- tolerations --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        (DeviceToleration(key="k", operator="Equal", value="v", effect="NoSchedule"), True),
        (DeviceToleration(key="k", value="v"), True),  # empty operator = Equal, empty effect = all
        (DeviceToleration(key="k", operator="Equal", value="other"), False),
        (DeviceToleration(key="k", operator="Exists"), True),
        (DeviceToleration(operator="Exists"), True),  # empty key + Exists tolerates everything
        (DeviceToleration(key="other", operator="Exists"), False),
        (DeviceToleration(key="k", operator="Exists", effect="NoExecute"), False),
        (DeviceToleration(key="k", operator="Weird", value="v"), False),
    ],
)
def test_tolerations(toleration: DeviceToleration, expected: bool) -> None:
    assert tolerates(toleration, "k", "v", "NoSchedule") is expected


# -- consumable capacity ------------------------------------------------------------------------------


def _spec(value: str, **policy: object) -> CapacitySpec:
    rng = policy.pop("range", None)
    pol = CapacityRequestPolicy(
        default=policy.get("default"),  # type: ignore[arg-type]
        valid_values=tuple(policy.get("values", ())),  # type: ignore[arg-type]
        valid_range=CapacityRequestPolicyRange(min=rng[0], max=rng[1], step=rng[2]) if rng else None,  # type: ignore[index]
    )
    return CapacitySpec(DeviceCapacity(value=value, request_policy=pol if (policy or rng) else None))


Q = Quantity.parse


@pytest.mark.parametrize(
    ("spec", "requested", "consumed"),
    [
        (_spec("10"), None, "10"),  # no request, no default: the whole capacity
        (_spec("10", default="2"), None, "2"),
        (_spec("10"), "3", "3"),
        (_spec("10", range=("2", "8", "2")), "3", "4"),  # min + k*step
        (_spec("10", range=("2", "8", "2")), "1", "2"),  # raised to min
        (_spec("10", range=("2", None, None)), "5", "5"),
        (_spec("10Gi", range=("1Gi", None, "512Mi")), "1200Mi", "1536Mi"),
        (_spec("10", range=("500m", None, "1")), "1", "1"),  # whole units, as Value()
        (_spec("10", values=("1", "4", "8")), "3", "4"),
        (_spec("10", values=("1", "4", "8")), "9", "9"),  # above every valid value: unchanged
    ],
)
def test_consumed_amount(spec: CapacitySpec, requested: str | None, consumed: str) -> None:
    assert consumed_amount(Q(requested) if requested else None, spec) == Q(consumed)


def test_policy_violations() -> None:
    ranged = _spec("10", default="3", range=("2", "6", "2"))
    assert violates_policy(Q("8"), ranged)  # above max
    assert not violates_policy(Q("3"), ranged)  # off-step but the default
    assert violates_policy(Q("5"), _spec("10", range=("2", "6", "2")))  # off-step
    assert not violates_policy(Q("4"), ranged)
    listed = _spec("10", values=("1", "4"))
    assert violates_policy(Q("3"), listed)
    assert not violates_policy(Q("4"), listed)


# -- pools and allocation outcomes -------------------------------------------------------------------------

CLASSES = {"class-a": device_class()}


def _allocate(slices, claims, state=None, **kw):
    return Allocator(slices, CLASSES, state, **kw).allocate(node(), claims)


def test_newest_generation_wins_and_obsolete_pools_are_ignored() -> None:
    old = slice_("a", [device("old")], generation=1)
    new = slice_("b", [device("new")], generation=2)
    results = _allocate([old, new], [claim("c", request("r"))])
    assert results is not None and results[0].devices.results[0].device == "new"
    # The node only sees generation 1 (complete), but generation 2 exists elsewhere and is
    # incomplete there: the local pool is obsolete and silently dropped.
    local_old = slice_("a", [device("old")], generation=1, count=2)
    remote_new = slice_("z", [device("x")], node_name="node-2", generation=2, count=2)
    assert _allocate([local_old, remote_new], [claim("c", request("r"))]) is None


def test_incomplete_pool_is_skipped_but_all_mode_refuses_it() -> None:
    partial = slice_("a", [device("d1")], count=2)
    assert _allocate([partial], [claim("c", request("r"))]) is None
    with pytest.raises(InvalidInputError, match="currently being updated"):
        _allocate([partial], [claim("c", request("r", mode="All"))])


def test_invalid_pool_is_node_scoped_only_when_nothing_else_fits() -> None:
    dup = [slice_("a", [device("d1")], count=2), slice_("b", [device("d1")], count=2)]
    with pytest.raises(NodeAllocationError, match="invalid resource pools") as info:
        _allocate(dup, [claim("c", request("r"))])
    assert info.value.invalid_pools == [("driver-a/pool-1", "duplicate device name d1")]
    other = slice_("c", [device("d9")], pool="pool-2")
    results = _allocate([*dup, other], [claim("c", request("r"))])
    assert results is not None and results[0].devices.results[0].pool == "pool-2"


def test_pools_sorted_by_driver_and_name_slices_by_name() -> None:
    slices = [
        slice_("z-slice", [device("d1")], pool="pool-b"),
        slice_("s2", [device("d3")], pool="pool-a", count=2),
        slice_("s1", [device("d2")], pool="pool-a", count=2),
    ]
    results = _allocate(slices, [claim("c", request("r", count=3))])
    assert results is not None
    assert [(r.pool, r.device) for r in results[0].devices.results] == [
        ("pool-a", "d2"),
        ("pool-a", "d3"),
        ("pool-b", "d1"),
    ]


def test_allocated_state_from_claims_skips_admin_access_and_splits_shared() -> None:
    from events.api.resource_v1 import (
        AllocationResult,
        DeviceAllocationResult,
        DeviceRequestAllocationResult,
        ResourceClaim,
        ResourceClaimStatus,
    )

    results = (
        DeviceRequestAllocationResult(request="r", driver="d", pool="p", device="x"),
        DeviceRequestAllocationResult(request="r", driver="d", pool="p", device="y", admin_access=True),
        DeviceRequestAllocationResult(
            request="r", driver="d", pool="p", device="z", share_id="s1", consumed_capacity={"mem": "1Gi"}
        ),
        DeviceRequestAllocationResult(
            request="r", driver="d", pool="p", device="z", share_id="s2", consumed_capacity={"mem": "1Gi"}
        ),
    )
    allocated = ResourceClaim(
        status=ResourceClaimStatus(
            allocation=AllocationResult(devices=DeviceAllocationResult(results=results))
        )
    )
    state = AllocatedState.from_claims([allocated, ResourceClaim()])
    assert state.exclusive == {("d", "p", "x")}
    assert state.shared == {("d", "p", "z", "s1"), ("d", "p", "z", "s2")}
    assert state.consumed[("d", "p", "z")]["mem"] == Quantity.parse("2Gi")
    assert state.allocated_any == {("d", "p", "x"), ("d", "p", "z")}


def test_already_allocated_devices_are_skipped() -> None:
    slices = [slice_("a", [device("d1"), device("d2")])]
    state = AllocatedState.build(exclusive=[("driver-a", "pool-1", "d1")])
    results = _allocate(slices, [claim("c", request("r"))], state)
    assert results is not None and results[0].devices.results[0].device == "d2"


def test_errors_name_claim_and_request() -> None:
    slices = [slice_("a", [device("d1")])]
    with pytest.raises(
        InvalidInputError, match="claim default/c, request r: could not retrieve device class nope"
    ):
        _allocate(slices, [claim("c", request("r", cls="nope"))])
    with pytest.raises(InvalidInputError, match="unsupported count mode Some"):
        _allocate(slices, [claim("c", request("r", mode="Some"))])
    with pytest.raises(InvalidInputError, match="empty constraint"):
        _allocate(slices, [claim("c", request("r"), constraints=(DeviceConstraint(),))])


def test_feature_switches_reproduce_upstream_refusals() -> None:
    slices = [slice_("a", [device("d1")])]
    with pytest.raises(InvalidInputError, match="admin access is requested, but the feature is disabled"):
        _allocate(slices, [claim("c", request("r", admin=True))], features=Features(admin_access=False))


# -- budgets -----------------------------------------------------------------------------------------------


def _impossible():
    devices = [device(f"d{i}", numa=i % 3) for i in range(24)]
    distinct = (DeviceConstraint(distinct_attribute="driver-a/numa"),)
    return [slice_("a", devices)], [claim("c", request("r", count=5), constraints=distinct)]


def test_step_budget_is_deterministic() -> None:
    slices, claims = _impossible()
    alloc = Allocator(slices, CLASSES)
    assert alloc.allocate(node(), claims) is None
    steps = alloc.last_steps
    assert steps > 100
    with pytest.raises(AllocationTimeout, match="search steps"):
        alloc.allocate(node(), claims, max_steps=steps // 2)
    assert alloc.allocate(node(), claims, max_steps=steps) is None


def test_time_budget() -> None:
    slices, claims = _impossible()
    with pytest.raises(AllocationTimeout, match="time budget"):
        Allocator(slices, CLASSES).allocate(node(), claims, timeout=0.0)


# -- share IDs, caches, taint rules ---------------------------------------------------------------


def test_share_ids_are_deterministic_and_unique() -> None:
    make = seeded_share_ids("seed")
    c1, c2 = claim("one"), claim("two")
    did = ("driver-a", "pool-1", "d1")
    assert make(c1, 0, did) == make(c1, 0, did)  # type: ignore[arg-type]
    assert len({make(c1, 0, did), make(c1, 1, did), make(c2, 0, did)}) == 3  # type: ignore[arg-type]
    assert seeded_share_ids("other")(c1, 0, did) != make(c1, 0, did)  # type: ignore[arg-type]


def test_slice_cache_reuses_prepared_slices() -> None:
    cache = SliceCache()
    a, b = slice_("a", [device("d1")]), slice_("b", [device("d2")], pool="pool-2")
    snap1 = cache.snapshot([a, b])
    assert cache.snapshot([a, b]) is snap1
    snap2 = cache.snapshot([a])
    assert snap2 is not snap1 and snap2.slices[0] is snap1.slices[0]


def test_taint_rules_apply_to_matching_devices_only() -> None:
    s1 = slice_("a", [device("d1"), device("d2")])
    s2 = slice_("b", [device("d1")], pool="pool-2")
    taint = DeviceTaint(key="k", effect="NoSchedule")
    rule = DeviceTaintRule(
        spec=DeviceTaintRuleSpec(device_selector=DeviceTaintSelector(pool="pool-1", device="d2"), taint=taint)
    )
    out = apply_taint_rules([s1, s2], [rule])
    assert out[1] is s2
    assert [d.taints for d in out[0].spec.devices] == [(), (taint,)]
    results = _allocate(out, [claim("c", request("r", count=2))])
    assert results is not None
    assert [(r.pool, r.device) for r in results[0].devices.results] == [("pool-1", "d1"), ("pool-2", "d1")]


def test_cancellation_is_polled() -> None:
    slices, claims = _impossible()
    with pytest.raises(AllocationTimeout, match="cancelled"):
        Allocator(slices, CLASSES).allocate(node(), claims, cancelled=lambda: True)


def test_results_feed_back_into_the_allocated_state() -> None:
    slices = [slice_("a", [device("d1"), device("d2")])]
    alloc = Allocator(slices, CLASSES)
    first = alloc.allocate(node(), [claim("c1", request("r"))])
    assert first is not None
    state = AllocatedState.build().with_allocations(first)
    second = Allocator(slices, CLASSES, state).allocate(node(), [claim("c2", request("r", count=2))])
    assert second is None
    third = Allocator(slices, CLASSES, state).allocate(node(), [claim("c2", request("r"))])
    assert third is not None and third[0].devices.results[0].device == "d2"
