"""Node-side plugins: requests arithmetic, fit reasons, taints, affinity, cordons, node name."""

from __future__ import annotations

import pytest

from draflow.services.scheduler.framework import Code, CycleState, Reserved, Unschedulable
from draflow.services.scheduler.framework.resources import (
    is_extended_resource,
    is_scalar_resource,
    pod_requests,
)
from tests.builders import bound_to, make_container, make_node, make_pod, make_taint, make_toleration
from tests.builders.scheduler import cluster


def test_pod_requests_sum_containers_peak_init_and_overhead() -> None:
    pod = make_pod(
        "p",
        containers=[
            make_container("a", requests={"cpu": "500m", "memory": "1Gi"}),
            make_container("b", requests={"cpu": "250m"}),
        ],
        init_containers=[make_container("init", requests={"cpu": "2", "memory": "100Mi"})],
        overhead={"cpu": "100m"},
    )
    # max(750m, 2000m) + 100m overhead; memory max(1Gi, 100Mi)
    assert pod_requests(pod) == {"cpu": 2100, "memory": 1024**3}


def test_pod_requests_sidecars_run_alongside() -> None:
    sidecar = make_container("sidecar", requests={"cpu": "300m"}, sidecar=True)
    pod = make_pod(
        "p",
        containers=[make_container("main", requests={"cpu": "1"})],
        init_containers=[sidecar, make_container("late-init", requests={"cpu": "1"})],
    )
    # regular: 1 + sidecar 0.3 = 1.3; init peak: late-init 1 + sidecar 0.3 = 1.3
    assert pod_requests(pod)["cpu"] == 1300


def test_resource_names() -> None:
    assert is_extended_resource("example.com/gpu")
    assert not is_extended_resource("kubernetes.io/foo")
    assert not is_extended_resource("cpu")
    assert is_scalar_resource("hugepages-2Mi") and is_scalar_resource("example.com/gpu")
    assert not is_scalar_resource("storage")


def _result(*objects: object, pod: object) -> object:
    core = cluster(*objects)
    return core.schedule(pod)  # type: ignore[arg-type]


def test_insufficient_cpu_and_memory_reasons_in_order() -> None:
    result = _result(make_node("n1", cpu="1", memory="1Gi"), pod=make_pod("p", cpu="2", memory="2Gi"))
    assert isinstance(result, Unschedulable)
    assert result.message == "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."
    assert result.unschedulable_plugins == {"NodeResourcesFit"}


def test_fit_counts_bound_and_assumed_pods() -> None:
    core = cluster(make_node("n1", cpu="2"), bound_to(make_pod("old", cpu="1500m"), "n1"))
    assert isinstance(core.schedule(make_pod("p", cpu="1")), Unschedulable)
    core.observe_deleted("Pod", "default", "old")
    first = core.schedule(make_pod("a", cpu="1"))
    assert isinstance(first, Reserved)  # now assumed on n1
    second = core.schedule(make_pod("b", cpu="1500m"))
    assert isinstance(second, Unschedulable)
    assert second.node_reasons == (("Insufficient cpu", 1),)


def test_too_many_pods_and_extended_resources() -> None:
    node = make_node("n1", pods=1, extra={"example.com/fpga": "2"})
    core = cluster(node, bound_to(make_pod("x"), "n1"))
    result = core.schedule(make_pod("p", requests={"example.com/fpga": "3"}))
    assert isinstance(result, Unschedulable)
    assert result.message == "0/1 nodes are available: 1 Insufficient example.com/fpga, 1 Too many pods."


def test_request_beyond_allocatable_is_unresolvable() -> None:
    core = cluster(
        make_node("n1", cpu="1"), make_node("n2", cpu="4"), bound_to(make_pod("x", cpu="3500m"), "n2")
    )
    state_pod = make_pod("p", cpu="2")
    result = core.schedule(state_pod)
    assert isinstance(result, Unschedulable)
    plugin = core.profile.plugin("NodeResourcesFit")
    statuses = {}
    state = CycleState(state_pod, core.cluster, core.config)
    plugin.pre_filter(state, state_pod)  # type: ignore[attr-defined]
    for name, info in core.cluster.nodes.items():
        statuses[name] = plugin.filter(state, state_pod, info)  # type: ignore[attr-defined]
    assert statuses["n1"].code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert statuses["n2"].code == Code.UNSCHEDULABLE


def test_taints_and_tolerations() -> None:
    tainted = make_node(
        "n1", taints=[make_taint("gpu", "true"), make_taint("soft", effect="PreferNoSchedule")]
    )
    result = _result(tainted, pod=make_pod("p"))
    assert isinstance(result, Unschedulable)
    assert result.message == "0/1 nodes are available: 1 node(s) had untolerated taint {gpu: true}."
    ok = make_pod("q", tolerations=[make_toleration("gpu", value="true", operator="Equal")])
    assert isinstance(_result(tainted, pod=ok), Reserved)
    exists_all = make_pod("r", tolerations=[make_toleration(operator="Exists")])
    assert isinstance(_result(tainted, pod=exists_all), Reserved)
    wrong_value = make_pod("s", tolerations=[make_toleration("gpu", value="false")])
    assert isinstance(_result(tainted, pod=wrong_value), Unschedulable)


def test_cordoned_node() -> None:
    result = _result(
        make_node("n1", unschedulable=True), make_node("n2", cpu="1"), pod=make_pod("p", cpu="2")
    )
    assert isinstance(result, Unschedulable)
    assert result.message == ("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable.")
    tolerant = make_pod(
        "q",
        tolerations=[
            make_toleration("node.kubernetes.io/unschedulable", effect="NoSchedule", operator="Exists")
        ],
    )
    reserved = _result(make_node("n1", unschedulable=True), pod=tolerant)
    assert isinstance(reserved, Reserved) and reserved.node_name == "n1"


def test_node_selector_and_required_affinity() -> None:
    nodes = [
        make_node("a", labels={"zone": "z1", "disk": "ssd"}),
        make_node("b", labels={"zone": "z2", "disk": "ssd"}),
        make_node("c", labels={"zone": "z2", "disk": "hdd"}),
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}
                ]
            }
        }
    }
    pod = make_pod("p", node_selector={"disk": "ssd"}, affinity=affinity)
    result = _result(*nodes, pod=pod)
    assert isinstance(result, Reserved) and result.node_name == "b"
    nowhere = make_pod("q", node_selector={"disk": "nvme"})
    result = _result(*nodes, pod=nowhere)
    assert isinstance(result, Unschedulable)
    assert result.message == "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."


def test_affinity_match_fields_and_bad_operator() -> None:
    by_name = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}
                ]
            }
        }
    }
    result = _result(make_node("a"), make_node("b"), pod=make_pod("p", affinity=by_name))
    assert isinstance(result, Reserved) and result.node_name == "b"
    bad = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["x"]}]}
                ]
            }
        }
    }
    result = _result(make_node("a"), pod=make_pod("q", affinity=bad))
    assert isinstance(result, Unschedulable)
    assert result.pre_filter_message == "'Near' is not a valid label selector operator"
    assert result.message == "0/1 nodes are available: 'Near' is not a valid label selector operator."


def test_node_name_plugin() -> None:
    result = _result(make_node("a"), make_node("b"), pod=make_pod("p", node_name=""))
    assert isinstance(result, Reserved)
    core = cluster(make_node("a"), make_node("b"))
    pinned = make_pod("p", node_name="b")
    result = core.schedule(pinned)
    assert isinstance(result, Reserved) and result.node_name == "b"
    result = core.schedule(make_pod("q", node_name="zzz"))
    assert isinstance(result, Unschedulable)
    assert result.message == "0/2 nodes are available: 2 node(s) didn't match the requested node name."


def test_no_nodes_is_an_error() -> None:
    from draflow.services.scheduler.framework import NO_NODES_MESSAGE, SchedulingError

    result = cluster().schedule(make_pod("p"))
    assert isinstance(result, SchedulingError) and result.message == NO_NODES_MESSAGE


def test_filter_attribution_stops_at_first_failing_plugin() -> None:
    # Cordoned and short of cpu: the node counts once, for the first plugin in filter order.
    result = _result(make_node("n1", cpu="1", unschedulable=True), pod=make_pod("p", cpu="2"))
    assert isinstance(result, Unschedulable)
    assert result.node_reasons == (("node(s) were unschedulable", 1),)


@pytest.mark.parametrize("count", [1, 7, 40])
def test_pods_without_claims_are_placed_deterministically(count: int) -> None:
    core = cluster(*[make_node(f"n{i}", pods=1000) for i in range(5)])
    placed = {}
    for i in range(count):
        result = core.schedule(make_pod(f"p{i}"))
        assert isinstance(result, Reserved)
        placed[i] = result.node_name
    if count >= 7:
        assert len(set(placed.values())) > 1  # the uid-hash start offset spreads equal nodes
    again = cluster(*[make_node(f"n{i}", pods=1000) for i in range(5)])
    assert placed == {i: again.schedule(make_pod(f"p{i}")).node_name for i in range(count)}  # type: ignore[union-attr]
