"""Taint eviction and pod GC, pure: who is evicted from a NoExecute-tainted node and when; which
pods of lost nodes are force-deleted."""

from __future__ import annotations

from typing import Any

from draflow.events.api.core_v1 import Pod, PodCondition, Toleration
from draflow.services.node_lifecycle.eviction import EvictionPlan, min_toleration_seconds, plan_evictions
from draflow.services.node_lifecycle.podgc import collect_pods
from draflow.services.node_lifecycle.taints import NOT_READY, OUT_OF_SERVICE, UNREACHABLE
from tests.builders import at, make_pod, make_taint, make_toleration, registered_node, stamp


def tolerates(key: str, seconds: int | None = None) -> Toleration:
    """A toleration of a ``NoExecute`` taint, as DefaultTolerationSeconds adds them."""
    return make_toleration(key, operator="Exists", effect="NoExecute", seconds=seconds)


def pod(
    name: str,
    node_name: str = "a",
    *,
    bound: float | None = None,
    created: float = 0.0,
    phase: str = "Running",
    **kw: Any,
) -> Pod:
    """A pod on ``node_name`` (namespace ``ns``), created and bound (``PodScheduled``) at these
    seconds after ``T0``."""
    scheduled = PodCondition(type="PodScheduled", status="True", last_transition_time=stamp(bound or 0))
    return make_pod(
        name,
        namespace="ns",
        node_name=node_name,
        phase=phase,
        created=stamp(created),
        conditions=(scheduled,) if bound is not None else (),
        **kw,
    )


# what DefaultTolerationSeconds gives every pod
DEFAULTS = (tolerates(NOT_READY, 300), tolerates(UNREACHABLE, 300))
TAINTED = registered_node(
    "a",
    ready="Unknown",
    taints=[
        make_taint(UNREACHABLE, effect="NoSchedule", added=10),
        make_taint(UNREACHABLE, effect="NoExecute", added=10),
    ],
)


def names(plan: EvictionPlan) -> list[str]:
    return [e.name for e in plan.due]


def test_a_pod_without_a_matching_toleration_is_evicted_at_once() -> None:
    plan = plan_evictions(TAINTED, [pod("bare")], at(11))
    assert names(plan) == ["bare"] and plan.due[0].due == at(11) and plan.scheduled == {}
    wrong = pod("wrong", tolerations=[tolerates(NOT_READY)])  # tolerates not-ready only
    assert names(plan_evictions(TAINTED, [wrong], at(11))) == ["wrong"]


def test_the_default_tolerations_evict_after_their_seconds() -> None:
    p = pod("web", tolerations=DEFAULTS, bound=0)
    early = plan_evictions(TAINTED, [p], at(309))
    assert early.due == () and early.scheduled == {("ns", "web"): at(310)} and early.next_due == at(310)
    due = plan_evictions(TAINTED, [p], at(310))
    assert names(due) == ["web"] and due.due[0].due == at(310)


def test_a_toleration_without_seconds_stays_forever() -> None:
    p = pod("db", tolerations=[tolerates(UNREACHABLE)])
    plan = plan_evictions(TAINTED, [p], at(100_000))
    assert plan.due == () and plan.scheduled == {}


def test_zero_or_negative_seconds_mean_at_once() -> None:
    for seconds in (0, -5):
        assert names(
            plan_evictions(TAINTED, [pod("p", tolerations=[tolerates(UNREACHABLE, seconds)])], at(10))
        ) == ["p"]
    assert min_toleration_seconds([tolerates(UNREACHABLE, 30), tolerates(UNREACHABLE)]) == 30
    assert min_toleration_seconds([tolerates(UNREACHABLE)]) is None


def test_a_pod_bound_after_the_taint_counts_from_its_binding() -> None:
    late = pod("late", tolerations=DEFAULTS, bound=200)
    assert plan_evictions(TAINTED, [late], at(300)).scheduled == {("ns", "late"): at(500)}


def test_the_first_matching_toleration_of_each_taint_is_used() -> None:
    both = registered_node(
        "a",
        ready="False",
        taints=[
            make_taint(NOT_READY, effect="NoExecute", added=0),
            make_taint("maintenance", effect="NoExecute", added=0),
        ],
    )
    p = pod(
        "p",
        tolerations=[
            tolerates(NOT_READY, 100),
            tolerates("", 50),
            tolerates(NOT_READY, 10),
        ],
    )
    # not-ready -> the first match (100 s); maintenance -> the empty-key toleration (50 s): min 50
    assert plan_evictions(both, [p], at(1)).scheduled == {("ns", "p"): at(50)}


def test_pods_elsewhere_or_already_deleting_and_untainted_nodes_are_left_alone() -> None:
    pods = [pod("other", node_name="b"), pod("going", deleting=True)]
    assert plan_evictions(TAINTED, pods, at(1000)).due == ()
    no_execute_free = registered_node(
        "a", ready="Unknown", taints=[make_taint(UNREACHABLE, effect="NoSchedule", added=0)]
    )
    assert plan_evictions(no_execute_free, [pod("bare")], at(1000)).due == ()


def test_a_users_no_execute_taint_without_time_added_counts_from_the_binding() -> None:
    user = registered_node("a", taints=[make_taint("drain", effect="NoExecute")])
    p = pod("p", tolerations=[tolerates("drain", 60)], bound=30)
    assert plan_evictions(user, [p], at(40)).scheduled == {("ns", "p"): at(90)}


# -- pod GC -------------------------------------------------------------------------------------------


def test_pods_of_a_deleted_node_are_force_deleted_after_the_quarantine() -> None:
    old, young, done = (
        pod("old", "gone"),
        pod("young", "gone", created=100),
        pod("done", "gone", phase="Succeeded"),
    )
    plan = collect_pods([old, young, done], {"a": registered_node("a")}, at(120), 40)
    assert [(d.name, d.why, d.mark_failed) for d in plan.deletes] == [
        ("old", "orphaned", True),
        ("done", "orphaned", False),
    ]
    assert plan.deletes[0].condition == ("DeletionByPodGC", "PodGC: node no longer exists")
    assert plan.next_due == at(140)


def test_terminating_pods_on_an_out_of_service_node_are_force_deleted() -> None:
    shut = registered_node(
        "a",
        ready="Unknown",
        taints=[make_taint(OUT_OF_SERVICE, value="nodeshutdown", effect="NoExecute", added=0)],
    )
    pods = [pod("going", deleting=True), pod("staying")]
    plan = collect_pods(pods, {"a": shut}, at(10), 40)
    assert [(d.name, d.why, d.condition) for d in plan.deletes] == [("going", "out-of-service", None)]
    # not while the node is Ready, and not without the taint
    ready = registered_node("a", taints=[make_taint(OUT_OF_SERVICE, effect="NoExecute", added=0)])
    assert collect_pods(pods, {"a": ready}, at(10), 40).deletes == ()
    assert collect_pods(pods, {"a": TAINTED}, at(10), 40).deletes == ()
