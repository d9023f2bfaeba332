"""The allocator's per-request diagnosis: what a failed search says about each (sub)request."""

from __future__ import annotations

import pytest

from draflow.events.api.resource_v1 import DeviceConstraint, DeviceTaint
from draflow.events.dra import DeviceElimination, RequestDiagnosis
from draflow.services.dra.structured import AllocatedState, Allocator, InvalidInputError
from draflow.services.dra.structured.diagnosis import group
from tests.builders import exact, first_available, make_claim, make_class, make_device, make_node, make_slice

pytestmark = pytest.mark.kep4381

NODE = make_node("node-1")
CLASSES = {"gpu": make_class("gpu")}


def _fail(claim_requests: list, slices: list | None = None, **kw: object) -> list[RequestDiagnosis]:
    claim = make_claim("c", *claim_requests, constraints=kw.pop("constraints", ()))  # type: ignore[arg-type]
    alloc = Allocator(slices or [make_slice("node-1", 8)], CLASSES, kw.pop("state", None))  # type: ignore[arg-type]
    assert alloc.allocate(NODE, [claim]) is None
    return alloc.last_diagnosis


def _reasons(line: RequestDiagnosis) -> dict[str, int]:
    return {e.reason: e.devices for e in line.eliminated}


def test_selector_that_matches_no_device() -> None:
    (line,) = _fail([exact(selectors=['device.attributes["gpu.example.com"].index == 99'])])
    assert (line.claim, line.request, line.device_class) == ("default/c", "gpu", "gpu")
    assert (line.class_matched, line.selected, line.usable, line.found, line.asked) == (8, 0, 0, 0, 1)
    assert line.outcome == "the request's selectors match none of the 8 devices of the class"
    assert line.source == "allocator" and line.node_names == ("node-1",)


def test_more_devices_than_the_node_has() -> None:
    (line,) = _fail([exact(count=12)])
    assert (line.class_matched, line.selected, line.usable, line.found, line.asked) == (8, 8, 8, 8, 12)
    assert line.outcome == "too few devices: 8 usable, 12 asked"
    assert line.eliminated == ()


def test_devices_allocated_to_other_claims() -> None:
    state = AllocatedState.build(exclusive=[("gpu.example.com", "node-1", f"dev-{i}") for i in range(6)])
    (line,) = _fail([exact(count=4)], state=state)
    assert _reasons(line) == {"allocated": 6}
    assert (line.usable, line.found) == (2, 2)
    assert line.outcome == "too few devices: 2 usable, 4 asked"


def test_admin_access_ignores_allocations() -> None:
    """adminAccess requests may use allocated devices: nothing eliminated for that reason."""
    state = AllocatedState.build(exclusive=[("gpu.example.com", "node-1", f"dev-{i}") for i in range(8)])
    (line,) = _fail([exact(count=9, admin=True)], state=state)
    assert line.admin_access and _reasons(line) == {} and line.usable == 8


def test_taints_eliminate() -> None:
    devices = [make_device(f"dev-{i}") for i in range(3)]
    tainted = make_device("dev-3")
    tainted = tainted.__class__(
        **{
            **{f: getattr(tainted, f) for f in tainted.__struct_fields__},
            "taints": (DeviceTaint(key="broken", effect="NoSchedule"),),
        }
    )
    (line,) = _fail([exact(count=4)], [make_slice("node-1", [*devices, tainted])])
    assert _reasons(line) == {"taints": 1}
    assert line.outcome == "too few devices: 3 usable, 4 asked"


def test_match_attribute_names_the_constraint() -> None:
    devices = [make_device(f"dev-{i}", model="a" if i < 2 else "b") for i in range(4)]
    con = DeviceConstraint(match_attribute="gpu.example.com/model")
    (line,) = _fail([exact(count=3)], [make_slice("node-1", devices)], constraints=(con,))
    assert line.usable == 4 and line.found == 2
    assert _reasons(line)["matchAttribute gpu.example.com/model"] >= 1
    assert line.outcome == "matchAttribute gpu.example.com/model: at most 2 of 3 devices satisfy it together"


def test_other_requests_of_the_pod_take_the_devices() -> None:
    first, second = _fail([exact("a", count=5), exact("b", count=5)])
    assert first.outcome == "fits"
    assert (second.usable, second.found) == (8, 3)
    assert second.outcome == "only 3 of 5 left after the pod's other requests took theirs"


def test_first_available_each_subrequest() -> None:
    big = first_available("gpu", ("large", "gpu", 12), ("medium", "gpu", 10))
    large, medium = _fail([big])
    assert (large.request, large.outcome) == ("gpu/large", "too few devices: 8 usable, 12 asked")
    assert (medium.request, medium.outcome) == ("gpu/medium", "too few devices: 8 usable, 10 asked")


def test_a_fit_leaves_no_diagnosis() -> None:
    alloc = Allocator([make_slice("node-1", 8)], CLASSES)
    assert alloc.allocate(NODE, [make_claim("x", exact(count=9))]) is None
    assert alloc.last_diagnosis
    assert alloc.allocate(NODE, [make_claim("c", exact(count=2))]) is not None
    assert alloc.last_diagnosis == []


def test_claim_limit_is_an_error_not_a_diagnosis() -> None:
    alloc = Allocator([make_slice("node-1", 8)], CLASSES)
    with pytest.raises(
        InvalidInputError, match="number of requested devices 40 exceeds the claim limit of 32"
    ):
        alloc.allocate(NODE, [make_claim("c", exact(count=40))])


def test_group_merges_nodes_with_the_same_outcome() -> None:
    def line(node: str, usable: int) -> RequestDiagnosis:
        return RequestDiagnosis(
            claim="default/c",
            request="gpu",
            asked=12,
            usable=usable,
            eliminated=(DeviceElimination(reason="allocated", devices=8 - usable),),
            outcome="too few",
            nodes=1,
            node_names=(node,),
        )

    lines = [line(f"node-{i}", 8) for i in (10, 2, 1)] + [line("node-3", 6)]
    merged = group(lines)
    assert [(x.nodes, x.node_names, x.usable) for x in merged] == [
        (3, ("node-1", "node-2", "node-10"), 8),
        (1, ("node-3",), 6),
    ]
    assert len(group(lines, limit=1)) == 1
