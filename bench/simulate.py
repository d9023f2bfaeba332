"""``draflow simulate``'s core cost: Cluster Autoscaler's estimate over the scheduler's plugins.

500 nodes x 10 devices (one ResourceSlice per node), ``--used`` of the devices held by running
pods (each with its allocated one-device claim), 1,000 pending pods each with its own one-GPU
claim, and one node group templated on ``node-000`` (unlimited). Every pending pod is placed where
the scheduler would put it, or on a new node of the group when no existing node has room: with
the defaults, 500 pods fill the free devices and 500 open 50 new nodes. Figures:

- ``snapshot_s``: building the simulation's ClusterState from the objects (``new_simulation``).
- ``estimate_s``: the estimate itself (PreFilter/Filter/Score per pod, SimulateBindPod, new nodes).
- ``total_s``: both; the issue's bound is 2 s.

Run ``python -m bench.simulate [--json] [--nodes N] [--devices D] [--pods P] [--used F]``.
"""

from __future__ import annotations

import argparse
import json
import time

from bench.scheduler_core import _class, _node, _slice
from draflow.events.api.core_v1 import (
    Container,
    Pod,
    PodResourceClaim,
    PodSpec,
    ResourceClaimRef,
    ResourceRequirements,
)
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.resource_v1 import (
    AllocationResult,
    DeviceAllocationResult,
    DeviceClaim,
    DeviceRequest,
    DeviceRequestAllocationResult,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceClaimConsumerReference,
    ResourceClaimSpec,
    ResourceClaimStatus,
)
from draflow.services.scheduler.autoscaler import NodeGroup, estimate, new_simulation, template_from_objects

DRIVER = "gpu.example.com"


def _pod(name: str, node: str = "") -> Pod:
    container = Container(name="main", resources=ResourceRequirements(claims=(ResourceClaimRef(name="gpu"),)))
    return Pod(
        metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"),
        spec=PodSpec(
            containers=(container,),
            resource_claims=(PodResourceClaim(name="gpu", resource_claim_name=f"{name}-gpu"),),
            node_name=node,
        ),
    )


def _claim(pod: str, node: str = "", device: str = "") -> ResourceClaim:
    request = ExactDeviceRequest(device_class_name="gpu", allocation_mode="ExactCount", count=1)
    status = ResourceClaimStatus()
    if node:
        result = DeviceRequestAllocationResult(request="gpu", driver=DRIVER, pool=node, device=device)
        status = ResourceClaimStatus(
            allocation=AllocationResult(devices=DeviceAllocationResult(results=(result,))),
            reserved_for=(ResourceClaimConsumerReference(resource="pods", name=pod, uid=f"uid-{pod}"),),
        )
    return ResourceClaim(
        metadata=ObjectMeta(name=f"{pod}-gpu", namespace="default", uid=f"uid-{pod}-gpu"),
        spec=ResourceClaimSpec(devices=DeviceClaim(requests=(DeviceRequest(name="gpu", exactly=request),))),
        status=status,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--devices", type=int, default=10)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--used", type=float, default=0.9, help="fraction of devices held by running pods")
    args = ap.parse_args()

    objects: list[object] = [_class()]
    used = int(args.devices * args.used)
    for n in range(args.nodes):
        node = f"node-{n:03d}"
        objects += [_node(node), _slice(node, args.devices)]
        for d in range(used):
            name = f"run-{n:03d}-{d}"
            objects += [_pod(name, node), _claim(name, node, f"gpu-{d}")]
    pending = [_pod(f"job-{i:04d}") for i in range(args.pods)]
    objects += [_claim(p.metadata.name) for p in pending]

    t0 = time.perf_counter()
    sim = new_simulation([*objects, *pending])
    t1 = time.perf_counter()
    cluster = sim.cluster
    template = template_from_objects(cluster.nodes["node-000"].node, cluster.slices.values(), "node-000")
    result = estimate(sim, pending, [NodeGroup("gpu", template)])
    t2 = time.perf_counter()

    placed = sum(1 for p in result.pods if p.node is not None)
    on_new = sum(1 for p in result.pods if p.new_node)
    figures = {
        "nodes": args.nodes,
        "devices_per_node": args.devices,
        "running_pods": args.nodes * used,
        "pending_pods": args.pods,
        "placed": placed,
        "on_new_nodes": on_new,
        "new_nodes": result.node_groups["gpu"].new_nodes,
        "snapshot_s": round(t1 - t0, 3),
        "estimate_s": round(t2 - t1, 3),
        "total_s": round(t2 - t0, 3),
        "per_pod_ms": round((t2 - t1) * 1000 / max(args.pods, 1), 3),
    }
    print(
        f"{args.nodes} nodes x {args.devices} devices, {figures['running_pods']} running pods, "
        f"{args.pods} pending one-GPU pods, one node group"
    )
    print(f"  placed {placed}/{args.pods} ({on_new} on {figures['new_nodes']} new nodes)")
    print(
        f"  snapshot {figures['snapshot_s']:.3f} s, estimate {figures['estimate_s']:.3f} s "
        f"({figures['per_pod_ms']:.2f} ms/pod), total {figures['total_s']:.3f} s"
    )
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
