"""What a simulated ``gpu.nvidia.com`` node has, and the ResourceSlice its kubelet plugin publishes.

The shape follows the NVIDIA DRA driver's documented slice attributes
(``tests/data/realworld/kubernetes-sigs__dra-driver-nvidia-gpu/site__content__docs__reference__
resourceslice-attributes.md.extract-device-fragments.yaml``): every device has ``type`` (``gpu`` or
``mig``), ``uuid``, ``productName``, ``brand``, ``architecture``, ``cudaComputeCapability``,
``driverVersion`` and ``cudaDriverVersion`` (versions) and a ``memory`` capacity; a full GPU also
has ``index`` and ``minor``; a MIG device ``profile``, ``parentUUID`` and ``parentIndex`` plus its
slice of engines. The simulated node is a GH200 machine (the MIG example's hardware): ``gpus``
GPUs, of which the last ``mig_gpus`` are in MIG mode, each split into seven ``1g.12gb`` instances
(the example's ``mig-partition.yaml``). As with a static MIG configuration, a GPU in MIG mode is
published only as its MIG devices, so a GPU and its instances can never be allocated twice.

Uuids are pure functions of node and position (the same across restarts and replays). Device
names are DNS labels: ``gpu-<i>`` and ``gpu-<i>-mig-1g12gb-<j>``.
"""

from __future__ import annotations

import hashlib

from draflow.events.api.meta import ObjectMeta, OwnerReference
from draflow.events.api.resource_v1 import (
    Device,
    DeviceAttribute,
    DeviceCapacity,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)

__all__ = [
    "DRIVER",
    "MAX_DEVICES",
    "MIG_PER_GPU",
    "MIG_PROFILE",
    "LayoutError",
    "NodeLayout",
    "device_uuids",
    "node_devices",
    "node_slice",
]

DRIVER = "gpu.nvidia.com"
PRODUCT = "NVIDIA GH200 96GB HBM3"
ARCHITECTURE = "Hopper"
COMPUTE_CAPABILITY = "9.0.0"
DRIVER_VERSION = "580.126.20"
CUDA_DRIVER_VERSION = "13.0.0"
GPU_MEMORY = "96Gi"
MIG_PROFILE = "1g.12gb"
MIG_PER_GPU = 7
MIG_MEMORY = "11776Mi"  # usable memory of a 1g.12gb instance (below the "12gb" of its name)
MAX_DEVICES = 128  # one slice: the pool never needs a second object


class LayoutError(ValueError):
    """A node layout the driver cannot publish (the kubelet refuses to start with it)."""


class NodeLayout:
    """``gpus`` GH200s, the last ``mig_gpus`` of them in MIG mode."""

    __slots__ = ("gpus", "mig_gpus")

    def __init__(self, gpus: int, mig_gpus: int = 0) -> None:
        if gpus < 0 or mig_gpus < 0:
            raise LayoutError("--nvidia-gpus and --nvidia-mig-gpus must be >= 0")
        if mig_gpus > gpus:
            raise LayoutError(f"--nvidia-mig-gpus {mig_gpus}: more than the node's {gpus} GPUs")
        devices = gpus - mig_gpus + mig_gpus * MIG_PER_GPU
        if devices > MAX_DEVICES:
            raise LayoutError(f"{devices} devices: more than {MAX_DEVICES} do not fit one ResourceSlice")
        self.gpus = gpus
        self.mig_gpus = mig_gpus

    def in_mig_mode(self, index: int) -> bool:
        return index >= self.gpus - self.mig_gpus


def _uuid(prefix: str, key: str) -> str:
    raw = hashlib.sha256(key.encode()).hexdigest()[:32]
    return f"{prefix}-{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:32]}"


def _common(uuid: str) -> dict[str, DeviceAttribute]:
    return {
        "uuid": DeviceAttribute(string=uuid),
        "productName": DeviceAttribute(string=PRODUCT),
        "brand": DeviceAttribute(string="Nvidia"),
        "architecture": DeviceAttribute(string=ARCHITECTURE),
        "cudaComputeCapability": DeviceAttribute(version=COMPUTE_CAPABILITY),
        "driverVersion": DeviceAttribute(version=DRIVER_VERSION),
        "cudaDriverVersion": DeviceAttribute(version=CUDA_DRIVER_VERSION),
    }


def node_devices(node_name: str, layout: NodeLayout) -> tuple[Device, ...]:
    out: list[Device] = []
    for i in range(layout.gpus):
        gpu_uuid = _uuid("GPU", f"{node_name}/{i}")
        if not layout.in_mig_mode(i):
            attrs = {
                "type": DeviceAttribute(string="gpu"),
                "index": DeviceAttribute(int_=i),
                "minor": DeviceAttribute(int_=i),
                **_common(gpu_uuid),
            }
            out.append(
                Device(
                    name=f"gpu-{i}", attributes=attrs, capacity={"memory": DeviceCapacity(value=GPU_MEMORY)}
                )
            )
            continue
        for j in range(MIG_PER_GPU):
            attrs = {
                "type": DeviceAttribute(string="mig"),
                "profile": DeviceAttribute(string=MIG_PROFILE),
                "parentIndex": DeviceAttribute(int_=i),
                "parentUUID": DeviceAttribute(string=gpu_uuid),
                **_common(_uuid("MIG", f"{node_name}/{i}/{j}")),
            }
            capacity = {
                "memory": DeviceCapacity(value=MIG_MEMORY),
                "multiprocessors": DeviceCapacity(value="16"),
                "copyEngines": DeviceCapacity(value="1"),
            }
            out.append(Device(name=f"gpu-{i}-mig-1g12gb-{j}", attributes=attrs, capacity=capacity))
    return tuple(out)


def device_uuids(devices: tuple[Device, ...]) -> dict[str, str]:
    """Device name -> uuid (what the node plugin hands the container as NVIDIA_VISIBLE_DEVICES)."""
    return {d.name: d.attributes["uuid"].string or "" for d in devices}


def node_slice(node_name: str, devices: tuple[Device, ...], node_uid: str = "") -> ResourceSlice:
    """The node's one slice, named ``<node>-gpu.nvidia.com`` (applied again at every kubelet start:
    unchanged when the layout is). One object per pool, so a changed layout keeps generation 1."""
    owners = (
        (OwnerReference(api_version="v1", kind="Node", name=node_name, uid=node_uid, controller=True),)
        if node_uid
        else ()
    )
    return ResourceSlice(
        metadata=ObjectMeta(name=f"{node_name}-{DRIVER}", owner_references=owners),
        spec=ResourceSliceSpec(
            driver=DRIVER,
            pool=ResourcePool(name=node_name, generation=1, resource_slice_count=1),
            node_name=node_name,
            devices=devices,
        ),
    )
