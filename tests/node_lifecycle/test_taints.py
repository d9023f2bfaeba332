"""The controller's taints and one pass over all nodes, pure: conditions -> taints, disruption modes."""

from __future__ import annotations

from events.api.core_v1 import Node, NodeCondition, Taint
from events.node import NodeHeartbeatLost, NodeTainted, NodeUntainted
from events.objects import status_updated
from projections.objects import fold
from services.node_lifecycle.config import LifecycleConfig
from services.node_lifecycle.controller import decide_nodes, node_events
from services.node_lifecycle.health import zone_states
from services.node_lifecycle.taints import NOT_READY, UNREACHABLE, UNSCHEDULABLE, taint_change
from tests.node_lifecycle.builders import at, lease, node, taint

CFG = LifecycleConfig()
NOW = at(100)
STAMP = "2026-01-01T00:01:40Z"


def keys(taints: tuple[Taint, ...]) -> set[tuple[str, str]]:
    return {(t.key, t.effect) for t in taints}


def change_for(n: Node, *others: Node) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    change = taint_change(n, zone_states([n, *others], CFG), NOW, CFG)
    if change is None:
        return set(), set()
    return keys(change.add), keys(change.remove)


HEALTHY = node("healthy")


def test_unknown_gets_both_unreachable_taints_with_time_added() -> None:
    change = taint_change(
        node("a", ready="Unknown"), zone_states([node("a", ready="Unknown"), HEALTHY], CFG), NOW, CFG
    )
    assert change is not None and change.remove == ()
    assert change.add == (
        Taint(key=UNREACHABLE, effect="NoSchedule", time_added=STAMP),
        Taint(key=UNREACHABLE, effect="NoExecute", time_added=STAMP),
    )
    assert change.reason == "Ready=Unknown"


def test_not_ready_gets_the_not_ready_taints() -> None:
    assert change_for(node("a", ready="False"), HEALTHY) == (
        {(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")},
        set(),
    )


def test_a_flip_swaps_the_taints_at_once() -> None:
    was_unreachable = node("a", ready="False", taints=[taint(effect="NoSchedule"), taint()])
    added, removed = change_for(was_unreachable, HEALTHY)
    assert added == {(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")}
    assert removed == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}


def test_ready_again_removes_the_controller_taints_only() -> None:
    mine = [taint(effect="NoSchedule"), taint()]
    users = [Taint(key="gpu", value="true", effect="NoSchedule"), Taint(key="drain", effect="NoExecute")]
    added, removed = change_for(node("a", taints=[*mine, *users]), HEALTHY)
    assert added == set() and removed == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
    assert taint_change(node("a", taints=users), {}, NOW, CFG) is None


def test_pressure_conditions_and_cordon_become_no_schedule_taints() -> None:
    pressure = NodeCondition(type="DiskPressure", status="True")
    added, _ = change_for(node("a", conditions=[pressure], unschedulable=True), HEALTHY)
    assert added == {("node.kubernetes.io/disk-pressure", "NoSchedule"), (UNSCHEDULABLE, "NoSchedule")}
    uncordoned = node("a", taints=[Taint(key=UNSCHEDULABLE, effect="NoSchedule")])
    assert change_for(uncordoned, HEALTHY) == (set(), {(UNSCHEDULABLE, "NoSchedule")})


def test_no_eviction_taints_while_no_node_is_ready() -> None:
    # every node down: the control plane is more likely cut off (master disruption mode)
    a = node("a", ready="Unknown", taints=[taint(effect="NoSchedule"), taint()])
    b = node("b", ready="Unknown")
    assert change_for(a, b) == (set(), {(UNREACHABLE, "NoExecute")})
    assert change_for(b, a) == ({(UNREACHABLE, "NoSchedule")}, set())


def test_a_partially_disrupted_small_zone_gets_no_new_eviction_taints() -> None:
    down = [node(f"d{i}", ready="Unknown") for i in range(3)]
    up = node("up")  # 3 of 4 not Ready: partial disruption, a small zone: eviction rate 0
    assert change_for(down[0], *down[1:], up) == ({(UNREACHABLE, "NoSchedule")}, set())
    # a swap still happens at once, and a large zone keeps tainting
    assert change_for(node("d0", ready="False", taints=[taint()]), *down[1:], up)[0] >= {
        (NOT_READY, "NoExecute")
    }
    small = LifecycleConfig(large_cluster_threshold=3)
    zones = zone_states([*down, up], small)
    change = taint_change(down[0], zones, NOW, small)
    assert change is not None and (UNREACHABLE, "NoExecute") in keys(change.add)


def test_one_pass_marks_the_silent_node_and_taints_it_in_one_decision() -> None:
    nodes = [node("a"), node("b", registered=90)]
    leases = {"a": lease("a", 50), "b": lease("b", 95)}
    (decision,) = decide_nodes(nodes, leases, NOW, CFG)
    assert decision.node_name == "a" and decision.became_not_ready
    facts = node_events(decision, NOW, observed_seq=7)
    assert [type(f) for f in facts] == [NodeHeartbeatLost, NodeTainted]
    lost = facts[0]
    assert isinstance(lost, NodeHeartbeatLost)
    assert lost.last_heartbeat == "2026-01-01T00:00:50.000000Z" and lost.at == "2026-01-01T00:01:40.000000Z"
    assert lost.observed_seq == 7 and isinstance(facts[1], NodeTainted) and facts[1].observed_seq == 7
    # the facts folded give the node upstream shows: Ready Unknown and both unreachable taints
    folded = nodes[0]
    for i, fact in enumerate(facts):
        folded = fold(folded, type(fact).type_name(), fact, 10 + i)
    ready = next(c for c in folded.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("Unknown", "NodeStatusUnknown")
    assert keys(folded.spec.taints) == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
    # the next pass has nothing to add; the kubelet back (Ready posted) -> the taints go
    assert decide_nodes([folded, nodes[1]], leases, at(101), CFG) == []
    back = fold(folded, "NodeStatusUpdated", status_updated("Node", node("a").status), 20)
    (again,) = decide_nodes([back, nodes[1]], {**leases, "a": lease("a", 101)}, at(102), CFG)
    assert again.lost is None and not again.became_not_ready
    (untainted,) = node_events(again, at(102))
    assert isinstance(untainted, NodeUntainted) and untainted.reason == "Ready=True"
    assert keys(untainted.taints) == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
