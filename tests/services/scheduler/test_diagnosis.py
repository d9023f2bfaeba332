"""The FitError message: kube-scheduler's shape, sorting and punctuation."""

from __future__ import annotations

from draflow.services.scheduler.framework import (
    Diagnosis,
    Unschedulable,
    failed_scheduling_event,
    pod_scheduled_condition,
)
from draflow.services.scheduler.framework.status import unresolvable, unschedulable
from tests.builders import exact, make_class, make_node, make_pod, make_slice, pod_with_template_claim
from tests.builders.scheduler import cluster


def _diag(*statuses: tuple[str, tuple[str, ...]]) -> Diagnosis:
    d = Diagnosis()
    for i, (plugin, reasons) in enumerate(statuses):
        d.reject_node(f"n{i}", unschedulable(*reasons, plugin=plugin))
    return d


def test_issue_example_shape() -> None:
    d = _diag(
        ("NodeResourcesFit", ("Insufficient cpu",)),
        *[("DynamicResources", ("cannot allocate all claims",))] * 3,
    )
    assert d.message(4) == "0/4 nodes are available: 1 Insufficient cpu, 3 cannot allocate all claims."
    assert d.unschedulable_plugins == {"NodeResourcesFit", "DynamicResources"}


def test_histogram_is_sorted_as_strings_like_go() -> None:
    # "10 b" < "2 a" as strings: upstream sorts the formatted "<count> <reason>" parts.
    d = _diag(*[("X", ("b",))] * 10, *[("Y", ("a",))] * 2)
    assert d.message(12) == "0/12 nodes are available: 10 b, 2 a."
    assert d.histogram() == [("b", 10), ("a", 2)]


def test_multiple_reasons_per_node_each_counted() -> None:
    d = _diag(("F", ("Insufficient cpu", "Insufficient memory")), ("F", ("Insufficient memory",)))
    assert d.message(3) == "0/3 nodes are available: 1 Insufficient cpu, 2 Insufficient memory."


def test_nodes_by_reason_names_the_first_nodes_in_natural_order() -> None:
    d = Diagnosis()
    for i in range(12, 0, -1):
        d.reject_node(f"node-{i}", unschedulable("Insufficient cpu", plugin="NodeResourcesFit"))
    d.reject_node("node-3", unschedulable("Insufficient cpu", "Insufficient memory", plugin="F"))
    assert d.nodes_by_reason(4) == {
        "Insufficient cpu": ("node-1", "node-2", "node-3", "node-4"),
        "Insufficient memory": ("node-3",),
    }
    assert sorted(d.nodes_by_reason(20)["Insufficient cpu"]) == sorted(f"node-{i}" for i in range(1, 13))


def test_prefilter_message_replaces_histogram() -> None:
    d = Diagnosis()
    d.pre_filter_message = "request gpu: device class gpu does not exist"
    d.reject_node("n1", unresolvable("ignored", plugin="DynamicResources"))
    assert d.message(5) == "0/5 nodes are available: request gpu: device class gpu does not exist."


def test_no_reasons_keeps_the_colon() -> None:
    assert Diagnosis().message(0) == "0/0 nodes are available:"


def test_condition_and_event_carry_the_message() -> None:
    pod, claim = pod_with_template_claim("p", exact(count=3))
    core = cluster(make_class(), make_node("n1"), make_slice("n1", 2), make_node("n2", cpu="1"), claim)
    result = core.schedule(
        make_pod(
            "big",
            cpu="2",
            template_claims={"gpu": "gpu-template"},
            statuses={"gpu": "p-gpu"},
            uid=pod.metadata.uid,
        )
    )
    assert isinstance(result, Unschedulable)
    assert result.message == "0/2 nodes are available: 1 Insufficient cpu, 1 cannot allocate all claims."
    cond = pod_scheduled_condition(result)
    assert (cond.type, cond.status, cond.reason, cond.message) == (
        "PodScheduled",
        "False",
        "Unschedulable",
        result.message,
    )
    event = failed_scheduling_event(result)
    assert (event.type, event.reason, event.message) == ("Warning", "FailedScheduling", result.message)
    assert result.plugin_reasons == {
        "DynamicResources": ("cannot allocate all claims",),
        "NodeResourcesFit": ("Insufficient cpu",),
    }
