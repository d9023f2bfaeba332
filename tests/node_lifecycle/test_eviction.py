"""Taint eviction and pod GC, pure: who is evicted from a NoExecute-tainted node and when; which
pods of lost nodes are force-deleted."""

from __future__ import annotations

from services.node_lifecycle.eviction import EvictionPlan, min_toleration_seconds, plan_evictions
from services.node_lifecycle.podgc import collect_pods
from services.node_lifecycle.taints import NOT_READY, OUT_OF_SERVICE, UNREACHABLE
from tests.node_lifecycle.builders import at, node, pod, taint, toleration

# what DefaultTolerationSeconds gives every pod
DEFAULTS = (toleration(NOT_READY, 300), toleration(UNREACHABLE, 300))
TAINTED = node("a", ready="Unknown", taints=[taint(effect="NoSchedule", added=10), taint(added=10)])


def names(plan: EvictionPlan) -> list[str]:
    return [e.name for e in plan.due]


def test_a_pod_without_a_matching_toleration_is_evicted_at_once() -> None:
    plan = plan_evictions(TAINTED, [pod("bare")], at(11))
    assert names(plan) == ["bare"] and plan.due[0].due == at(11) and plan.scheduled == {}
    wrong = pod("wrong", tolerations=[toleration(NOT_READY)])  # tolerates not-ready only
    assert names(plan_evictions(TAINTED, [wrong], at(11))) == ["wrong"]


def test_the_default_tolerations_evict_after_their_seconds() -> None:
    p = pod("web", tolerations=DEFAULTS, bound=0)
    early = plan_evictions(TAINTED, [p], at(309))
    assert early.due == () and early.scheduled == {("ns", "web"): at(310)} and early.next_due == at(310)
    due = plan_evictions(TAINTED, [p], at(310))
    assert names(due) == ["web"] and due.due[0].due == at(310)


def test_a_toleration_without_seconds_stays_forever() -> None:
    p = pod("db", tolerations=[toleration(UNREACHABLE)])
    plan = plan_evictions(TAINTED, [p], at(100_000))
    assert plan.due == () and plan.scheduled == {}


def test_zero_or_negative_seconds_mean_at_once() -> None:
    for seconds in (0, -5):
        assert names(
            plan_evictions(TAINTED, [pod("p", tolerations=[toleration(seconds=seconds)])], at(10))
        ) == ["p"]
    assert min_toleration_seconds([toleration(seconds=30), toleration(seconds=None)]) == 30
    assert min_toleration_seconds([toleration(seconds=None)]) is None


def test_a_pod_bound_after_the_taint_counts_from_its_binding() -> None:
    late = pod("late", tolerations=DEFAULTS, bound=200)
    assert plan_evictions(TAINTED, [late], at(300)).scheduled == {("ns", "late"): at(500)}


def test_the_first_matching_toleration_of_each_taint_is_used() -> None:
    both = node("a", ready="False", taints=[taint(NOT_READY, added=0), taint("maintenance", added=0)])
    p = pod(
        "p",
        tolerations=[
            toleration(NOT_READY, 100),
            toleration("", 50, operator="Exists"),
            toleration(NOT_READY, 10),
        ],
    )
    # not-ready -> the first match (100 s); maintenance -> the empty-key toleration (50 s): min 50
    assert plan_evictions(both, [p], at(1)).scheduled == {("ns", "p"): at(50)}


def test_pods_elsewhere_or_already_deleting_and_untainted_nodes_are_left_alone() -> None:
    pods = [pod("other", node_name="b"), pod("going", deleting=True)]
    assert plan_evictions(TAINTED, pods, at(1000)).due == ()
    no_execute_free = node("a", ready="Unknown", taints=[taint(effect="NoSchedule")])
    assert plan_evictions(no_execute_free, [pod("bare")], at(1000)).due == ()


def test_a_users_no_execute_taint_without_time_added_counts_from_the_binding() -> None:
    user = node("a", taints=[taint("drain", added=None)])
    p = pod("p", tolerations=[toleration("drain", 60)], bound=30)
    assert plan_evictions(user, [p], at(40)).scheduled == {("ns", "p"): at(90)}


# -- pod GC -------------------------------------------------------------------------------------------


def test_pods_of_a_deleted_node_are_force_deleted_after_the_quarantine() -> None:
    old, young, done = (
        pod("old", "gone"),
        pod("young", "gone", created=100),
        pod("done", "gone", phase="Succeeded"),
    )
    plan = collect_pods([old, young, done], {"a": node("a")}, at(120), 40)
    assert [(d.name, d.why, d.mark_failed) for d in plan.deletes] == [
        ("old", "orphaned", True),
        ("done", "orphaned", False),
    ]
    assert plan.deletes[0].condition == ("DeletionByPodGC", "PodGC: node no longer exists")
    assert plan.next_due == at(140)


def test_terminating_pods_on_an_out_of_service_node_are_force_deleted() -> None:
    shut = node("a", ready="Unknown", taints=[taint(OUT_OF_SERVICE, value="nodeshutdown")])
    pods = [pod("going", deleting=True), pod("staying")]
    plan = collect_pods(pods, {"a": shut}, at(10), 40)
    assert [(d.name, d.why, d.condition) for d in plan.deletes] == [("going", "out-of-service", None)]
    # not while the node is Ready, and not without the taint
    ready = node("a", taints=[taint(OUT_OF_SERVICE)])
    assert collect_pods(pods, {"a": ready}, at(10), 40).deletes == ()
    assert collect_pods(pods, {"a": TAINTED}, at(10), 40).deletes == ()
