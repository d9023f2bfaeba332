"""Node health, pure: heartbeats (Lease renewals, the Ready condition), Unknown conditions, zones."""

from __future__ import annotations

from msgspec.structs import replace

from draflow.events.api.core_v1 import Node, NodeCondition
from draflow.services.node_lifecycle.config import LifecycleConfig, parse_duration, parse_time
from draflow.services.node_lifecycle.health import (
    EXCLUDE_DISRUPTION_LABEL,
    FULL_DISRUPTION,
    NORMAL,
    PARTIAL_DISRUPTION,
    check_heartbeat,
    last_heartbeat,
    zone_key,
    zone_states,
)
from tests.builders import at, make_lease, registered_node

CFG = LifecycleConfig()  # grace 40s, startup grace 60s


def test_a_renewed_lease_keeps_the_node_ready() -> None:
    n = registered_node("a")
    assert check_heartbeat(n, make_lease("a", 30), at(69), CFG) is None  # renewed 39 s ago
    assert check_heartbeat(n, make_lease("a", 30), at(70), CFG) is None  # exactly the grace period: not after
    assert check_heartbeat(n, None, at(39), CFG) is None  # no lease yet: the Ready heartbeat counts


def test_a_silent_kubelet_turns_every_kubelet_condition_unknown() -> None:
    lost = check_heartbeat(registered_node("a"), make_lease("a", 10), at(50.5), CFG)
    assert lost is not None and lost.last_heartbeat == at(10) and lost.grace_period_s == 40
    assert [c.type for c in lost.conditions] == ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"]
    for cond in lost.conditions:
        assert cond.status == "Unknown"
        assert cond.reason == "NodeStatusUnknown"
        assert cond.message == "Kubelet stopped posting node status."
        assert cond.last_transition_time == "2026-01-01T00:00:50Z"
        assert cond.last_heartbeat_time == "2026-01-01T00:00:00Z"  # the kubelet's last post, kept


def test_the_later_heartbeat_wins() -> None:
    posted = registered_node("a", registered=100)  # Ready posted at 100, lease last renewed at 10
    assert last_heartbeat(posted, make_lease("a", 10)) == at(100)
    assert check_heartbeat(posted, make_lease("a", 10), at(120), CFG) is None
    assert check_heartbeat(posted, make_lease("a", 10), at(141), CFG) is not None


def test_a_restarted_controller_gives_every_node_a_fresh_grace_period() -> None:
    assert check_heartbeat(registered_node("a"), make_lease("a", 0), at(300), CFG, since=at(280)) is None
    lost = check_heartbeat(registered_node("a"), make_lease("a", 0), at(321), CFG, since=at(280))
    assert lost is not None and lost.last_heartbeat == at(280)


def test_nothing_is_written_while_ready_is_unknown_already() -> None:
    assert check_heartbeat(registered_node("a", ready="Unknown"), make_lease("a", 0), at(500), CFG) is None


def test_a_node_that_never_posted_status_gets_the_startup_grace_period() -> None:
    bare = registered_node("hand-made", registered=5, ready=None)
    assert check_heartbeat(bare, None, at(64), CFG) is None  # 60 s from creation
    lost = check_heartbeat(bare, None, at(66), CFG)
    assert lost is not None and lost.grace_period_s == 60
    assert {c.reason for c in lost.conditions} == {"NodeStatusNeverUpdated"}
    assert {c.message for c in lost.conditions} == {"Kubelet never posted node status."}
    assert {c.last_heartbeat_time for c in lost.conditions} == {"2026-01-01T00:00:05Z"}


def test_only_changed_conditions_are_written() -> None:
    pressure = NodeCondition(type="DiskPressure", status="Unknown", reason="x")
    lost = check_heartbeat(registered_node("a", conditions=[pressure]), make_lease("a", 0), at(41), CFG)
    assert lost is not None and "DiskPressure" not in [c.type for c in lost.conditions]


def test_zone_states_after_compute_zone_state() -> None:
    def zone(name: str, z: str, ready: str = "True") -> Node:
        return registered_node(name, labels={"topology.kubernetes.io/zone": z}, ready=ready)

    nodes = [
        zone("a1", "a", "Unknown"),
        zone("a2", "a", "Unknown"),  # zone a: nothing Ready -> full
        zone("b1", "b", "Unknown"),
        zone("b2", "b", "False"),
        zone("b3", "b", "Unknown"),
        zone("b4", "b"),  # zone b: 3 of 4 not Ready (> 2, >= 55%) -> partial
        zone("c1", "c", "Unknown"),
        zone("c2", "c"),  # zone c: 1 of 2 -> normal
    ]
    states = zone_states(nodes, CFG)
    assert states[zone_key(nodes[0])].state == FULL_DISRUPTION
    assert states[zone_key(nodes[2])].state == PARTIAL_DISRUPTION
    assert states[zone_key(nodes[6])].state == NORMAL
    excluded = registered_node("x", ready="Unknown", labels={EXCLUDE_DISRUPTION_LABEL: ""})
    assert zone_states([excluded], CFG) == {}


def test_zone_key_prefers_the_beta_labels() -> None:
    n = registered_node(
        "a", labels={"topology.kubernetes.io/zone": "z", "failure-domain.beta.kubernetes.io/zone": "old"}
    )
    assert zone_key(n) == ":\x00:old"
    assert zone_key(registered_node("a")) == ""
    assert (
        zone_key(replace(registered_node("a"), metadata=replace(registered_node("a").metadata, labels={})))
        == ""
    )


def test_go_durations_and_timestamps() -> None:
    assert parse_duration("40s") == 40
    assert parse_duration("1m30s") == 90
    assert parse_duration("250ms") == 0.25
    assert parse_duration("2") == 2
    for bad in ("", "4x", "-1s"):
        try:
            parse_duration(bad)
        except ValueError:
            continue
        raise AssertionError(bad)
    assert parse_time("2026-01-01T00:00:10.500000Z") == at(10.5)
    assert parse_time("garbage") is None and parse_time(None) is None
