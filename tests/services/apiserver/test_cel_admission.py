"""Admitting user CEL never stalls the apiserver's answers to others (issue 14), real nats-server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import StatusError

pytestmark = pytest.mark.kep4381


def claim(name: str, selectors: list[str], requests: int = 1) -> dict[str, Any]:
    per = (len(selectors) + requests - 1) // requests
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": f"r{i}",
                        "exactly": {
                            "deviceClassName": "gpu.example.com",
                            "selectors": [
                                {"cel": {"expression": e}} for e in selectors[i * per : (i + 1) * per]
                            ],
                        },
                    }
                    for i in range(requests)
                ]
            }
        },
    }


async def _timed_gets(api: ApiClient, done: asyncio.Event) -> list[float]:
    latencies: list[float] = []
    while not done.is_set():
        start = time.perf_counter()
        await api.get("Namespace", "default")
        latencies.append(time.perf_counter() - start)
        await asyncio.sleep(0.005)
    return latencies


async def test_catastrophic_regex_selector_is_admitted_in_milliseconds(api: ApiClient) -> None:
    # with Python's re this admission held the event loop for 7.6 s (a concurrent get waited)
    expr = "'" + "a" * 28 + "!'.matches('^(a+)+$')"
    done = asyncio.Event()
    gets = asyncio.create_task(_timed_gets(api, done))
    start = time.perf_counter()
    (result,) = await api.apply([claim("evil", [expr])])
    took = time.perf_counter() - start
    done.set()
    latencies = await gets
    assert result.outcome == "created", result.error
    assert took < 1.0
    assert max(latencies) < 1.0


async def test_selectors_are_checked_off_the_event_loop(api: ApiClient) -> None:
    # 64 distinct selectors of ~10 KiB: checking them takes a noticeable time; reads go on meanwhile
    clause = (
        "device.attributes['gpu.example.com'].model.matches('^a[0-9]+$') && "
        "device.capacity['gpu.example.com'].memory.compareTo(quantity('{n}Gi')) >= 0"
    )
    selectors = [" || ".join(clause.format(n=i * 100 + j) for j in range(65)) for i in range(64)]
    assert all(len(s) <= 10 * 1024 for s in selectors)
    done = asyncio.Event()
    gets = asyncio.create_task(_timed_gets(api, done))
    await asyncio.sleep(0.05)
    start = time.perf_counter()
    (result,) = await api.apply([claim("many", selectors, requests=2)])
    took = time.perf_counter() - start
    done.set()
    latencies = await gets
    assert result.outcome == "created", result.error
    # the check took a while, but no read waited for it (GIL turns of a few ms at most)
    assert took > 0.2, f"checking took only {took:.3f}s: the test needs bigger selectors"
    assert max(latencies) < took / 2, (max(latencies), took)


async def test_invalid_regex_is_refused_with_kubernetes_message(api: ApiClient) -> None:
    (bad,) = await api.apply([claim("bad", ["device.driver.matches('x++')"])])
    assert bad.error is not None and bad.error.code == 422
    assert "cel.expression: Invalid value" in bad.error.message
    assert "compilation failed: ERROR: <input>:1:23: invalid matches argument" in bad.error.message
    try:
        await api.get("ResourceClaim", "bad")
    except StatusError as exc:
        assert exc.status.code == 404
    else:
        raise AssertionError("a refused claim was stored")


async def test_a_selector_over_the_estimated_cost_is_forbidden(api: ApiClient) -> None:
    """Kubernetes' own validation case (k8s pkg/apis/resource/validation, "CEL-cost"): seven nested
    all() over ten elements is refused before anything runs, with the API server's words; five
    levels are admitted."""
    ten = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
    expr = "int('1'.find('[0-9]*')) < 100"
    for var in ("z5", "z4", "z3", "z2", "z", "y", "x"):
        expr = f"{ten}.all({var}, {expr})"
    (bad,) = await api.apply([claim("costly", [expr])])
    assert bad.error is not None and bad.error.code == 422, bad
    assert bad.error.message == (
        'ResourceClaim.resource.k8s.io "default/costly" is invalid: '
        "spec.devices.requests[0].exactly.selectors[0].cel.expression: "
        "Forbidden: too complex, exceeds cost limit"
    )
    five = "x == 1"
    for var in ("z3", "z2", "z", "y", "x"):
        five = f"{ten}.all({var}, {five})"
    (ok,) = await api.apply([claim("affordable", [five])])
    assert ok.outcome == "created", ok.error


def test_the_precheck_finds_every_expression_and_skips_kinds_without_any() -> None:
    from draflow.services.apiserver.admission.cel import cel_expressions

    pod = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": [{"cel": {"expression": "odd"}}]}}
    found = cel_expressions([claim("c", ["device.driver == 'a'", "device.driver == 'b'"]), pod])
    assert sorted(found) == ["device.driver == 'a'", "device.driver == 'b'"]
    assert cel_expressions(pod) == []  # a pod has no CEL in its schema: not walked
    # a kind that is not a string is walked (validation refuses it later), not a TypeError
    odd = {"kind": ["Pod"], "spec": {"x": [{"cel": {"expression": "e"}}]}}
    assert cel_expressions([odd, {"kind": {"a": 1}}]) == ["e"]
