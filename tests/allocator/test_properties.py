"""Property test: on small random scenarios the allocator finds a solution exactly when one exists,
and every solution it returns is valid (no device twice, counts met, constraints hold, selectors hold).

The oracle enumerates every combination of devices per request, so it is independent of the search
order; it covers ExactCount, All, request selectors, allocated devices and match/distinct constraints.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.api.resource_v1 import CELDeviceSelector, DeviceConstraint, DeviceRequest, DeviceSelector
from services.dra.structured import AllocatedState, Allocator, InvalidInputError
from tests.allocator.builders import claim, device, device_class, node, request, slice_

CLASSES = {"class-a": device_class()}
MODEL_A = 'device.attributes["driver-a"].model == "a"'


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 5))
    devs = [(f"d{i}", draw(st.integers(0, 2)), draw(st.sampled_from("ab"))) for i in range(n)]
    allocated = draw(st.sets(st.sampled_from([d[0] for d in devs]), max_size=2))
    n_requests = draw(st.integers(1, 3))
    layout = draw(st.sampled_from(["one-claim", "claim-per-request"]))
    reqs = []
    for i in range(n_requests):
        mode = draw(st.sampled_from(["ExactCount", "ExactCount", "All"]))
        reqs.append(
            {
                "name": f"r{i}",
                "mode": mode,
                "count": draw(st.integers(1, 3)) if mode == "ExactCount" else 0,
                "model_a": draw(st.booleans()),
            }
        )
    constraint = draw(st.sampled_from([None, "match", "distinct"]))
    return {
        "devices": devs,
        "allocated": allocated,
        "requests": reqs,
        "layout": layout,
        "constraint": constraint,
    }


def _request(r: dict[str, Any]) -> DeviceRequest:
    req = request(r["name"], count=r["count"], mode=r["mode"])
    if r["model_a"]:
        assert req.exactly is not None
        sel = (DeviceSelector(cel=CELDeviceSelector(expression=MODEL_A)),)
        exactly = type(req.exactly)(
            device_class_name=req.exactly.device_class_name,
            allocation_mode=req.exactly.allocation_mode,
            count=req.exactly.count,
            selectors=sel,
        )
        req = DeviceRequest(name=req.name, exactly=exactly)
    return req


def _eligible(sc: dict[str, Any], r: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [d for d in sc["devices"] if not r["model_a"] or d[2] == "a"]


def _groups(sc: dict[str, Any]) -> list[list[dict[str, Any]]]:
    if sc["layout"] == "one-claim":
        return [sc["requests"]]
    return [[r] for r in sc["requests"]]


def _constraint_ok(kind: str | None, numas: list[int]) -> bool:
    if kind == "match":
        return len(set(numas)) <= 1
    if kind == "distinct":
        return len(set(numas)) == len(numas)
    return True


def _oracle(sc: dict[str, Any]) -> bool:
    """Does any assignment satisfy every rule?"""
    options = []
    for r in sc["requests"]:
        elig = _eligible(sc, r)
        if r["mode"] == "All":
            options.append([tuple(elig)] if elig else [])
        else:
            options.append(list(itertools.combinations(elig, r["count"])))
    for choice in itertools.product(*options):
        used = [d for combo in choice for d in combo]
        names = [d[0] for d in used]
        if len(set(names)) != len(names) or set(names) & sc["allocated"]:
            continue
        ok = True
        pos = 0
        for group in _groups(sc):
            picked = [d for combo in choice[pos : pos + len(group)] for d in combo]
            pos += len(group)
            if not _constraint_ok(sc["constraint"], [d[1] for d in picked]):
                ok = False
        if ok:
            return True
    return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_allocator_agrees_with_exhaustive_oracle(sc: dict[str, Any]) -> None:
    slices = [slice_("s", [device(name, numa=numa, model=model) for name, numa, model in sc["devices"]])]
    constraints: tuple[DeviceConstraint, ...] = ()
    if sc["constraint"] == "match":
        constraints = (DeviceConstraint(match_attribute="driver-a/numa"),)
    elif sc["constraint"] == "distinct":
        constraints = (DeviceConstraint(distinct_attribute="driver-a/numa"),)
    claims = [
        claim(f"c{i}", *[_request(r) for r in group], constraints=constraints)
        for i, group in enumerate(_groups(sc))
    ]
    state = AllocatedState.build(exclusive=[("driver-a", "pool-1", n) for n in sc["allocated"]])
    try:
        results = Allocator(slices, CLASSES, state).allocate(node(), claims)
    except InvalidInputError as exc:
        # Upstream treats an All-mode device list that breaks a claim constraint as broken input.
        assert "constraint would not be satisfied" in str(exc)
        assert sc["constraint"] and any(r["mode"] == "All" for r in sc["requests"])
        return
    assert (results is not None) == _oracle(sc)
    if results is None:
        return
    attrs = {name: (numa, model) for name, numa, model in sc["devices"]}
    seen: set[str] = set()
    for group, result in zip(_groups(sc), results, strict=True):
        picked = [r.device for r in result.devices.results]
        assert not set(picked) & seen and not set(picked) & sc["allocated"], "device used twice"
        assert len(set(picked)) == len(picked)
        seen |= set(picked)
        assert _constraint_ok(sc["constraint"], [attrs[d][0] for d in picked])
        for r in group:
            mine = [x.device for x in result.devices.results if x.request == r["name"]]
            elig = [d[0] for d in _eligible(sc, r)]
            assert set(mine) <= set(elig)
            if r["mode"] == "All":
                assert sorted(mine) == sorted(elig), "All must take every matching device"
            else:
                assert len(mine) == r["count"]
