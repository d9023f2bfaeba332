"""Scheduling core cost: CPU time per scheduling decision in scheduler_perf's DRA shape.

500 nodes x 10 devices (one ResourceSlice per node), one DeviceClass, pods each with a claim
generated from a template asking for one device, scheduled until the cluster is full. Every
decision is fed back as the PodScheduling saga would (the claim with its allocation and
reservedFor, then the bound pod), so the state grows like the real pipeline's. Figures:

- ``decide_ms_*``: ``Scheduler.schedule_next()`` (pop + PreFilter/Filter/Score/Reserve).
- ``feedback_ms_*``: observing the written claim and the bound pod.
- ``assumed_decide_ms_*``: the same decisions while nothing is fed back (all in the assume cache).
- ``unschedulable_ms``: a pod that fits nowhere on the full cluster (every node diagnosed).
- ``event_ms_*``: queue requeue work per cluster event with 1,000 pods waiting in the
  unschedulable pool: a claim of another pod written (``unrelated``), a claim deallocated
  (``deallocated``: every waiting DRA pod moves, as upstream).
- ``prioritized_decide_ms_*``: pods whose claim has a firstAvailable request (two devices,
  else one); still walked best-first.
- ``sampled_decide_ms_*``: pods whose claim has two one-device requests with different
  selectors: no best-first order applies, so the cycle samples ``numFeasibleNodesToFind``
  nodes and scores them, as kube-scheduler does (``--percentage`` changes the sample).

Run ``python -m bench.scheduler_core [--json] [--nodes N] [--devices D] [--percentage P]``.

``--steady FILL`` measures scheduler_perf's steady state instead, on the core alone: the cluster is
filled to ``FILL`` (0.5: half its devices allocated, every decision fed back), then pods are
created, scheduled, fed back and the oldest deleted (pod and claim) one after the other, and
``steady_ms_*`` is the CPU time of all of that per pod. ``--shape`` picks the claim: ``one``
device, ``selector`` (one device with a CEL selector on capacity and an attribute, upstream's
``resourceclaimtemplate-with-selector``) or ``match`` (two devices with ``matchAttribute`` on a
per-node attribute, upstream's ``resourceclaimtemplate-for-two-devices``). Comparing ``--nodes
500`` with ``--nodes 5000`` shows what grows with the cluster (it should not).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import msgspec

from draflow.events.api.core_v1 import (
    Container,
    Node,
    NodeStatus,
    Pod,
    PodResourceClaim,
    PodResourceClaimStatus,
    PodSpec,
    PodStatus,
    ResourceRequirements,
)
from draflow.events.api.meta import ObjectMeta, OwnerReference
from draflow.events.api.resource_v1 import (
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
    DeviceSubRequest,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceClaimSpec,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)
from draflow.services.scheduler.framework import ClaimBinding, Reserved, Scheduler, SchedulerConfig
from draflow.services.scheduler.plugins import default_plugins
from draflow.services.scheduler.plugins.dynamicresources import prebind_claim

DRIVER = "gpu.example.com"
SELECTOR = (
    f"device.capacity['{DRIVER}'].memory.compareTo(quantity('1Gi')) == 0 && "
    f"device.attributes['{DRIVER}'].family == 'GPU'"
)
SAMPLED_PODS = 1000


def _node(name: str) -> Node:
    alloc: dict[str, str | int | float] = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    return Node(
        metadata=ObjectMeta(name=name, uid=f"uid-{name}", labels={"kubernetes.io/hostname": name}),
        status=NodeStatus(allocatable=alloc, capacity=dict(alloc)),
    )


def _slice(node: str, devices: int, rich: bool = False) -> ResourceSlice:
    """``rich``: also a family, the slice's name and a memory capacity (what the steady state's
    CEL selector and matchAttribute shapes read)."""

    def attributes(i: int) -> dict[str, DeviceAttribute]:
        attrs = {"index": DeviceAttribute(int_=i), "model": DeviceAttribute(string="h100")}
        if rich:
            attrs |= {"family": DeviceAttribute(string="GPU"), "slice": DeviceAttribute(string=node)}
        return attrs

    capacity = {"memory": DeviceCapacity(value="1Gi")} if rich else {}
    devs = tuple(Device(name=f"gpu-{i}", attributes=attributes(i), capacity=capacity) for i in range(devices))
    return ResourceSlice(
        metadata=ObjectMeta(name=f"{node}-gpu"),
        spec=ResourceSliceSpec(
            driver=DRIVER,
            pool=ResourcePool(name=node, generation=1, resource_slice_count=1),
            node_name=node,
            devices=devs,
        ),
    )


def _class() -> DeviceClass:
    sel = DeviceSelector(cel=CELDeviceSelector(expression=f'device.driver == "{DRIVER}"'))
    return DeviceClass(metadata=ObjectMeta(name="gpu"), spec=DeviceClassSpec(selectors=(sel,)))


def _requests(shape: str) -> tuple[DeviceRequest, ...]:
    def one(name: str, selector: str = "") -> DeviceRequest:
        sels = (DeviceSelector(cel=CELDeviceSelector(expression=selector)),) if selector else ()
        exactly = ExactDeviceRequest(
            device_class_name="gpu", allocation_mode="ExactCount", count=1, selectors=sels
        )
        return DeviceRequest(name=name, exactly=exactly)

    if shape == "one":
        return (one("gpu"),)
    if shape == "selector":
        return (one("gpu", SELECTOR),)
    if shape == "match":
        two = ExactDeviceRequest(device_class_name="gpu", allocation_mode="ExactCount", count=2)
        return (DeviceRequest(name="gpu", exactly=two),)
    if shape == "two":  # two signatures: no single count orders the nodes
        return (one("gpu"), one("any", f'device.attributes["{DRIVER}"].index >= 0'))
    subs = tuple(
        DeviceSubRequest(name=name, device_class_name="gpu", allocation_mode="ExactCount", count=n)
        for name, n in (("pair", 2), ("one", 1))
    )
    return (DeviceRequest(name="gpu", first_available=subs),)


def _constraints(shape: str) -> tuple[DeviceConstraint, ...]:
    if shape != "match":
        return ()
    return (DeviceConstraint(requests=("gpu",), match_attribute=f"{DRIVER}/slice"),)


def _pod_and_claim(i: int, shape: str = "one") -> tuple[Pod, ResourceClaim]:
    name = f"pod-{i}"
    claim_name = f"{name}-gpu-x7k2p"
    reqs: dict[str, str | int | float] = {"cpu": "100m", "memory": "128Mi"}
    pod = Pod(
        metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-pod-{i}"),
        spec=PodSpec(
            containers=(Container(name="c", image="x", resources=ResourceRequirements(requests=reqs)),),
            resource_claims=(PodResourceClaim(name="gpu", resource_claim_template_name="gpu-template"),),
            scheduler_name="default-scheduler",
        ),
        status=PodStatus(
            phase="Pending",
            resource_claim_statuses=(PodResourceClaimStatus(name="gpu", resource_claim_name=claim_name),),
        ),
    )
    owner = OwnerReference(api_version="v1", kind="Pod", name=name, uid=pod.metadata.uid, controller=True)
    claim = ResourceClaim(
        metadata=ObjectMeta(
            name=claim_name, namespace="default", uid=f"uid-claim-{i}", owner_references=(owner,)
        ),
        spec=ResourceClaimSpec(
            devices=DeviceClaim(requests=_requests(shape), constraints=_constraints(shape))
        ),
    )
    return pod, claim


def _cpu_ms(fn: Any) -> tuple[float, Any]:
    t0 = time.thread_time_ns()
    out = fn()
    return (time.thread_time_ns() - t0) / 1e6, out


def _stats(prefix: str, times: list[float], out: dict[str, float]) -> None:
    ordered = sorted(times)
    out[f"{prefix}_ms_mean"] = statistics.fmean(ordered)
    out[f"{prefix}_ms_p50"] = statistics.median(ordered)
    out[f"{prefix}_ms_p99"] = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _setup(
    nodes: int, devices: int, pods: int, config: SchedulerConfig, shape: str = "one", rich: bool = False
) -> tuple[Scheduler, list[Pod], dict]:
    core = Scheduler(config, plugins=default_plugins(), clock=lambda: 0.0)
    core.observe(_class())
    for i in range(nodes):
        name = f"node-{i:04d}"
        core.observe(_node(name))
        core.observe(_slice(name, devices, rich))
    all_pods: list[Pod] = []
    claims: dict[str, ResourceClaim] = {}
    for i in range(pods):
        pod, claim = _pod_and_claim(i, shape)
        core.observe(claim)
        core.observe(pod)
        all_pods.append(pod)
        claims[pod.metadata.name] = claim
    return core, all_pods, claims


def measure(nodes: int = 500, devices: int = 10, percentage: int | None = None) -> dict[str, float]:
    config = SchedulerConfig(percentage_of_nodes_to_score=percentage)
    total = nodes * devices
    out: dict[str, float] = {"nodes": nodes, "devices_per_node": devices, "pods": total}

    # With feedback (the steady state of the real pipeline).
    core, pods, claims = _setup(nodes, devices, total, config)
    by_key = {f"default/{p.metadata.name}": p for p in pods}
    decide: list[float] = []
    feedback: list[float] = []
    reserved = 0
    result_of_first: ClaimBinding | None = None
    while True:
        ms, step = _cpu_ms(core.schedule_next)
        if step is None:
            break
        decide.append(ms)
        qpi, result = step
        if not isinstance(result, Reserved):
            raise SystemExit(f"unexpected {result}")
        reserved += 1
        if result_of_first is None:
            result_of_first = result.claims[0]
        pod = by_key[qpi.key]
        claim = claims[pod.metadata.name]

        def feed(claim: ResourceClaim = claim, pod: Pod = pod, result: Reserved = result) -> None:
            written = prebind_claim(claim, result.claims[0])
            core.observe(written)
            core.observe(
                msgspec.structs.replace(
                    pod, spec=msgspec.structs.replace(pod.spec, node_name=result.node_name)
                )
            )

        ms, _ = _cpu_ms(feed)
        feedback.append(ms)
    out["reserved"] = reserved
    _stats("decide", decide, out)
    _stats("feedback", feedback, out)
    out["decisions_per_s_cpu"] = 1000.0 / statistics.fmean(decide)

    extra_pod, extra_claim = _pod_and_claim(total)
    core.observe(extra_claim)
    ms, result = _cpu_ms(lambda: core.schedule(extra_pod))
    out["unschedulable_ms"] = ms
    out["unschedulable_message"] = result.message

    waiting = []
    for i in range(total, total + 1000):
        pod, claim = _pod_and_claim(i + 1)
        core.observe(claim)
        core.observe(pod)
        waiting.append(claim)
    while core.schedule_next() is not None:
        pass
    assert result_of_first is not None and result_of_first.claim.name == claims["pod-0"].metadata.name
    written = prebind_claim(claims["pod-0"], result_of_first)
    ms, _ = _cpu_ms(lambda: core.observe(written))
    out["event_ms_unrelated"] = ms
    ms, _ = _cpu_ms(lambda: core.observe(claims["pod-0"]))  # allocation gone: devices came free
    out["event_ms_deallocated"] = ms

    # Without feedback: everything stays in the assume cache.
    core, pods, _ = _setup(nodes, devices, total, config)
    assumed: list[float] = []
    while True:
        ms, step = _cpu_ms(core.schedule_next)
        if step is None:
            break
        assumed.append(ms)
    _stats("assumed_decide", assumed, out)

    for label, shape in (("prioritized_decide", "firstAvailable"), ("sampled_decide", "two")):
        core, pods, _ = _setup(nodes, devices, min(SAMPLED_PODS, total // 2), config, shape)
        warm, warm_claim = _pod_and_claim(total + 1, shape)
        core.observe(warm_claim)
        core.schedule(warm)  # builds the device index outside the timing
        core.cluster.forget(f"default/{warm.metadata.name}")
        times: list[float] = []
        while True:
            ms, step = _cpu_ms(core.schedule_next)
            if step is None:
                break
            times.append(ms)
        _stats(label, times, out)
    return out


def measure_steady(
    nodes: int, devices: int, fill: float, shape: str, pods: int, percentage: int | None = None
) -> dict[str, float | str]:
    """scheduler_perf's steady state on the core (see the module docstring)."""
    config = SchedulerConfig(percentage_of_nodes_to_score=percentage)
    core, _, _ = _setup(nodes, devices, 0, config, shape, rich=True)
    per_pod = 2 if shape == "match" else 1
    live: list[tuple[Pod, ResourceClaim]] = []
    counter = 0

    def one() -> None:
        nonlocal counter
        pod, claim = _pod_and_claim(counter, shape)
        counter += 1
        core.observe(claim)
        core.observe(pod)
        step = core.schedule_next()
        assert step is not None
        result = step[1]
        if not isinstance(result, Reserved):
            raise SystemExit(f"unexpected {result}")
        written = prebind_claim(claim, result.claims[0])
        core.observe(written)
        spec = msgspec.structs.replace(pod.spec, node_name=result.node_name)
        live.append((msgspec.structs.replace(pod, spec=spec), written))

    target = int(nodes * devices * fill) // per_pod
    t0 = time.process_time()
    while len(live) < target:
        one()
    fill_s = time.process_time() - t0
    times: list[float] = []
    for _ in range(pods):
        t = time.thread_time_ns()
        one()
        old_pod, old_claim = live.pop(0)
        core.observe_deleted("Pod", "default", old_pod.metadata.name)
        core.observe_deleted("ResourceClaim", "default", old_claim.metadata.name)
        times.append((time.thread_time_ns() - t) / 1e6)
    out: dict[str, float | str] = {
        "nodes": nodes,
        "devices_per_node": devices,
        "shape": shape,
        "fill": fill,
        "allocated_claims": target,
        "fill_ms_per_pod": fill_s * 1000 / max(target, 1),
    }
    figures: dict[str, float] = {}
    _stats("steady", times, figures)
    out.update(figures)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--devices", type=int, default=10)
    parser.add_argument(
        "--percentage", type=int, default=None, help="percentageOfNodesToScore (default adaptive)"
    )
    parser.add_argument(
        "--steady", type=float, default=None, metavar="FILL", help="steady state at this fill"
    )
    parser.add_argument("--shape", choices=("one", "selector", "match"), default="one")
    parser.add_argument("--pods", type=int, default=2000, help="steady-state pods measured")
    args = parser.parse_args(argv)
    figures: dict[str, Any]
    if args.steady is not None:
        figures = measure_steady(
            args.nodes, args.devices, args.steady, args.shape, args.pods, args.percentage
        )
    else:
        figures = measure(args.nodes, args.devices, args.percentage)
    for key, value in figures.items():
        if isinstance(value, float):
            print(f"{key:<32} {value:>12,.3f}")
        else:
            print(f"{key:<32} {value}")
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
