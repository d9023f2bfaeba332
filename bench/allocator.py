"""Allocator latency: CPU time per ``Allocator.allocate`` call for typical and worst-case claims.

Cases (each a fresh claim object per call, the allocator and slice snapshot reused, as in a
scheduling cycle that tries many nodes; "warm" = the node's pools and the devices' CEL verdicts
are cached, which is the steady state while slices do not change):

- ``simple``: one-device claim, node with 10 devices, 500 nodes' slices in the cluster.
- ``constraint``: 4-device claim with matchAttribute (numa), node with 64 devices.
- ``all128``: node with 128 devices, all of them claimed. One claim holds at most 32 results
  (AllocationResultsMaxSize), so it is a pod with 4 claims of 32 (All mode, one group each);
  ``all128_single_claim_reject`` is a single All-mode claim for 128, refused by that limit.
- ``backtrack``: a claim that cannot be satisfied (5 devices with distinct numa, only 3 numa
  values among 24 devices), so the search exhausts every combination.
- ``simple_cold``: the simple case on a node seen for the first time (pools gathered, CEL run).

Run ``python -m bench.allocator [--json] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from events.api.core_v1 import Node
from events.api.meta import ObjectMeta
from events.api.resource_v1 import (
    CELDeviceSelector,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceClaim,
    DeviceClass,
    DeviceClassSpec,
    DeviceConstraint,
    DeviceRequest,
    DeviceSelector,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceClaimSpec,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)
from services.dra.structured import AllocationError, Allocator, SliceCache

try:
    from bench.cel import measure as measure_cel
except ModuleNotFoundError:  # run as ``python bench/allocator.py``: bench/ itself is on sys.path
    from cel import measure as measure_cel  # type: ignore[no-redef]

DRIVER = "gpu.example.com"


def _node(name: str) -> Node:
    return Node(metadata=ObjectMeta(name=name, labels={"kubernetes.io/hostname": name, "zone": "a"}))


def _device(i: int, groups: int = 4, numa: int = 8) -> Device:
    return Device(
        name=f"gpu-{i}",
        attributes={
            "model": DeviceAttribute(string="h100" if i % 4 else "a100"),
            "numa": DeviceAttribute(int_=i % numa),
            "group": DeviceAttribute(int_=i % groups),
            "driverVersion": DeviceAttribute(version="1.2.3"),
        },
        capacity={"memory": DeviceCapacity(value="80Gi")},
    )


def _slice(node: str, n: int, **kw: Any) -> ResourceSlice:
    return ResourceSlice(
        metadata=ObjectMeta(name=f"{node}-{DRIVER}"),
        spec=ResourceSliceSpec(
            driver=DRIVER,
            pool=ResourcePool(name=node, generation=1, resource_slice_count=1),
            node_name=node,
            devices=tuple(_device(i, **kw) for i in range(n)),
        ),
    )


def _class() -> DeviceClass:
    sel = DeviceSelector(cel=CELDeviceSelector(expression=f'device.driver == "{DRIVER}"'))
    return DeviceClass(metadata=ObjectMeta(name="gpu"), spec=DeviceClassSpec(selectors=(sel,)))


def _claim(
    name: str, requests: list[DeviceRequest], constraints: tuple[DeviceConstraint, ...] = ()
) -> ResourceClaim:
    return ResourceClaim(
        metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"),
        spec=ResourceClaimSpec(devices=DeviceClaim(requests=tuple(requests), constraints=constraints)),
    )


def _exact(name: str, count: int, mode: str = "ExactCount", selector: str | None = None) -> DeviceRequest:
    sels = (DeviceSelector(cel=CELDeviceSelector(expression=selector)),) if selector else ()
    return DeviceRequest(
        name=name,
        exactly=ExactDeviceRequest(
            device_class_name="gpu", allocation_mode=mode, count=count, selectors=sels
        ),
    )


def _timed(fn: Callable[[], object], seconds: float, min_calls: int = 50) -> list[float]:
    """CPU milliseconds of each call, for at least ``seconds`` wall time and ``min_calls`` calls."""
    times: list[float] = []
    end = time.perf_counter() + seconds
    while len(times) < min_calls or time.perf_counter() < end:
        t0 = time.thread_time_ns()
        fn()
        times.append((time.thread_time_ns() - t0) / 1e6)
    return times


def _stats(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def measure(seconds: float = 1.0) -> dict[str, float]:
    classes = {"gpu": _class()}
    out: dict[str, float] = {}
    per_case = max(seconds / 5, 0.1)

    # simple: 500 nodes x 10 devices, one-device claim.
    nodes = [f"node-{i}" for i in range(500)]
    slices = [_slice(n, 10) for n in nodes]
    snapshot = SliceCache().snapshot(slices)
    allocator = Allocator(snapshot, classes)
    node_objs = [_node(n) for n in nodes]
    counter = [0]

    def simple() -> object:
        counter[0] += 1
        node = node_objs[counter[0] % 50]
        result = allocator.allocate(node, [_claim("c", [_exact("r", 1)])])
        assert result is not None
        return result

    for _ in range(100):
        simple()
    out["allocate_simple_ms_p50"], out["allocate_simple_ms_p99"] = _stats(_timed(simple, per_case))

    cold_times: list[float] = []
    for i in range(100):
        fresh = Allocator(SliceCache().snapshot([_slice(f"cold-{i}", 10)]), classes)
        node = _node(f"cold-{i}")
        t0 = time.thread_time_ns()
        fresh.allocate(node, [_claim("c", [_exact("r", 1)])])
        cold_times.append((time.thread_time_ns() - t0) / 1e6)
    out["allocate_simple_cold_ms_p50"], out["allocate_simple_cold_ms_p99"] = _stats(cold_times)

    # constraint: 64 devices, 4 devices with the same numa node.
    big = Allocator([_slice("big", 64)], classes)
    big_node = _node("big")
    match = (DeviceConstraint(match_attribute=f"{DRIVER}/numa"),)

    def constraint() -> object:
        result = big.allocate(big_node, [_claim("c", [_exact("r", 4)], match)])
        assert result is not None and len(result[0].devices.results) == 4
        return result

    constraint()
    out["allocate_constraint_ms_p50"], out["allocate_constraint_ms_p99"] = _stats(
        _timed(constraint, per_case)
    )

    # all128: 4 claims x All-mode over one quarter each.
    full = Allocator([_slice("full", 128)], classes)
    full_node = _node("full")

    def all128() -> object:
        claims = [
            _claim(f"q{g}", [_exact("r", 0, "All", f'device.attributes["{DRIVER}"].group == {g}')])
            for g in range(4)
        ]
        result = full.allocate(full_node, claims)
        assert result is not None and sum(len(r.devices.results) for r in result) == 128
        return result

    all128()
    out["allocate_all128_ms_p50"], out["allocate_all128_ms_p99"] = _stats(_timed(all128, per_case, 20))

    def reject() -> object:
        try:
            full.allocate(full_node, [_claim("c", [_exact("r", 0, "All")])])
        except AllocationError as exc:
            return exc
        raise AssertionError("128 devices in one claim must be refused")

    out["allocate_all128_single_claim_reject_ms_p50"], _ = _stats(_timed(reject, per_case / 2))

    # backtracking worst case: impossible distinctAttribute, every combination explored.
    bt = Allocator([_slice("bt", 24, numa=3)], classes)
    bt_node = _node("bt")
    distinct = (DeviceConstraint(distinct_attribute=f"{DRIVER}/numa"),)

    def backtrack() -> object:
        result = bt.allocate(bt_node, [_claim("c", [_exact("r", 5)], distinct)])
        assert result is None
        return result

    backtrack()
    out["allocate_backtrack_ms_p50"], out["allocate_backtrack_ms_p99"] = _stats(
        _timed(backtrack, per_case, 10)
    )
    out["allocate_backtrack_steps"] = float(bt.last_steps)

    out.update(measure_cel(max(seconds / 2, 0.5)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=5.0, help="total measuring time (about)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    results = measure(args.seconds)
    width = max(len(k) for k in results)
    for key, value in results.items():
        shown = f"{value:>12,.0f}" if key.endswith(("_per_s", "_steps")) else f"{value:>12.3f}"
        print(f"{key:<{width}}  {shown}")
    if args.json:
        print(json.dumps({k: round(v, 4) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
