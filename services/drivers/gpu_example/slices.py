"""The example driver's ResourceSlices: N GPUs per node, published like dra-example-driver does.

Shape (compare ``tests/data/realworld/kubernetes-sigs__dra-example-driver/README.md.extract-
resourceslice-list.yaml``): driver ``gpu.example.com``; one pool per node, named after the node;
``nodeName`` set; devices ``gpu-<i>`` with attributes ``index`` (int), ``uuid`` (string
``gpu-<uuid>``), ``model: LATEST-GPU-MODEL``, ``driverVersion: 1.0.0`` (version) and capacity
``memory: 80Gi``; slice ``generateName`` ``<node>-gpu.example.com-`` with the Node as controlling
owner. Newer dra-example-driver releases also publish ``compute: 100`` and
``allowMultipleAllocations: false``; the dump (and this driver) do not.

The uuid differs from upstream's on purpose: upstream seeds Go's ``math/rand`` with a hash of the
node name; here it is derived from ``sha256("<node>/<index>")`` — deterministic per node and index
(the same across restarts and replays), same format.

``sync_pool`` is the publisher's decision, after ``k8s.io/dynamic-resource-allocation/resourceslice``:
compare the desired slices with the published ones and create / update / delete, bumping the pool
generation when more than one object changes (so consumers never mix old and new slices). A
fresh pool therefore starts at generation 1, as the current controller does; the 2024 dump shows
0 (an older controller) — ``build_slices`` takes the generation as a parameter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import msgspec

from events.api.meta import ObjectMeta, OwnerReference
from events.api.resource_v1 import (
    Device,
    DeviceAttribute,
    DeviceCapacity,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)
from services.runtime.naming import SuffixSource, hash_suffix, unique_generated_name

__all__ = [
    "DRIVER",
    "MAX_DEVICES_PER_SLICE",
    "SlicePlan",
    "build_slices",
    "gpu_devices",
    "gpu_uuid",
    "sync_pool",
]

DRIVER = "gpu.example.com"
MODEL = "LATEST-GPU-MODEL"
DRIVER_VERSION = "1.0.0"
MEMORY = "80Gi"
MAX_DEVICES_PER_SLICE = 128


def gpu_uuid(node_name: str, index: int) -> str:
    """``gpu-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``, a pure function of node and index."""
    raw = hashlib.sha256(f"{node_name}/{index}".encode()).hexdigest()[:32]
    return f"gpu-{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:32]}"


def gpu_devices(node_name: str, num_gpus: int) -> tuple[Device, ...]:
    return tuple(
        Device(
            name=f"gpu-{i}",
            attributes={
                "index": DeviceAttribute(int_=i),
                "uuid": DeviceAttribute(string=gpu_uuid(node_name, i)),
                "model": DeviceAttribute(string=MODEL),
                "driverVersion": DeviceAttribute(version=DRIVER_VERSION),
            },
            capacity={"memory": DeviceCapacity(value=MEMORY)},
        )
        for i in range(num_gpus)
    )


def _chunks(devices: Sequence[Device]) -> list[tuple[Device, ...]]:
    """At most 128 devices fit a slice; more make a pool of several slices (one, if empty)."""
    chunks = [
        tuple(devices[i : i + MAX_DEVICES_PER_SLICE]) for i in range(0, len(devices), MAX_DEVICES_PER_SLICE)
    ]
    return chunks or [()]


def _new_slice(
    node_name: str, node_uid: str, devices: tuple[Device, ...], pool: ResourcePool, name: str
) -> ResourceSlice:
    # The Node owns its slices (deleting the node removes them); without its uid (node not
    # registered yet) no owner reference can be written.
    owners = (
        (OwnerReference(api_version="v1", kind="Node", name=node_name, uid=node_uid, controller=True),)
        if node_uid
        else ()
    )
    return ResourceSlice(
        metadata=ObjectMeta(name=name, generate_name=f"{node_name}-{DRIVER}-", owner_references=owners),
        spec=ResourceSliceSpec(driver=DRIVER, pool=pool, node_name=node_name, devices=devices),
    )


def build_slices(
    node_name: str,
    num_gpus: int = 8,
    generation: int = 0,
    *,
    node_uid: str = "",
    suffixes: SuffixSource = hash_suffix,
    taken: Collection[str] = (),
) -> list[ResourceSlice]:
    """The slices of a fresh pool (nothing published yet) at ``generation``."""
    chunks = _chunks(gpu_devices(node_name, num_gpus))
    pool = ResourcePool(name=node_name, generation=generation, resource_slice_count=len(chunks))
    used = set(taken)
    out = []
    for i, devices in enumerate(chunks):
        name = unique_generated_name(
            f"{node_name}-{DRIVER}-", f"{node_name}/{generation}/{i}", used, suffixes
        )
        used.add(name)
        out.append(_new_slice(node_name, node_uid, devices, pool, name))
    return out


@dataclass(slots=True)
class SlicePlan:
    create: list[ResourceSlice] = field(default_factory=list)
    update: list[ResourceSlice] = field(default_factory=list)
    delete: list[ResourceSlice] = field(default_factory=list)
    generation: int = 0

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def _same_devices(current: ResourceSlice, desired: tuple[Device, ...]) -> bool:
    return {d.name for d in current.spec.devices} == {d.name for d in desired} and len(
        current.spec.devices
    ) == len(desired)


def sync_pool(
    node_name: str,
    num_gpus: int,
    current: Sequence[ResourceSlice],
    *,
    node_uid: str = "",
    suffixes: SuffixSource = hash_suffix,
    taken: Collection[str] = (),
) -> SlicePlan:
    """Bring the node's published pool to ``num_gpus`` GPUs (``current``: this driver's slices for it)."""
    desired = _chunks(gpu_devices(node_name, num_gpus))
    mine = [s for s in current if s.spec.driver == DRIVER and s.spec.pool.name == node_name]
    generation = max((s.spec.pool.generation for s in mine), default=0)
    plan = SlicePlan(delete=[s for s in mine if s.spec.pool.generation < generation])
    live = sorted((s for s in mine if s.spec.pool.generation == generation), key=lambda s: s.metadata.name)
    matched: dict[int, ResourceSlice] = {}
    if len(live) == 1 and len(desired) == 1:
        matched[0] = live[0]
    else:
        for slice_ in live:
            index = next(
                (i for i, d in enumerate(desired) if i not in matched and _same_devices(slice_, d)), None
            )
            if index is None:
                plan.delete.append(slice_)
            else:
                matched[index] = slice_
    pool = ResourcePool(name=node_name, generation=generation, resource_slice_count=len(desired))
    changed = {
        i
        for i, s in matched.items()
        if s.spec.pool != pool or s.spec.devices != desired[i] or s.spec.node_name != node_name
    }
    new = len(desired) - len(matched)
    # One object to touch: consumers cannot see a mix, keep the generation. Otherwise bump it, so
    # the old slices stop counting as soon as one new one is there (a fresh pool starts at 1).
    bump = not (new == 0 and len(changed) <= 1)
    if bump:
        generation += 1
        pool = msgspec.structs.replace(pool, generation=generation)
    plan.generation = generation
    for i, slice_ in sorted(matched.items()):
        if i in changed or bump:
            spec = msgspec.structs.replace(slice_.spec, pool=pool, devices=desired[i], node_name=node_name)
            plan.update.append(msgspec.structs.replace(slice_, spec=spec))
    used = set(taken) | {s.metadata.name for s in mine}
    for i, devices in enumerate(desired):
        if i in matched:
            continue
        name = unique_generated_name(
            f"{node_name}-{DRIVER}-", f"{node_name}/{generation}/{i}", used, suffixes
        )
        used.add(name)
        plan.create.append(_new_slice(node_name, node_uid, devices, pool, name))
    return plan
