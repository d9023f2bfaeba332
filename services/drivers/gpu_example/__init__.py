"""``gpu.example.com``: the example GPU driver, in the spirit of kubernetes-sigs/dra-example-driver.

``slices`` publishes N GPUs per node as ResourceSlices (pool per node, correct generations),
``plugin`` is the node plugin (prepare/unprepare, CDI specs, failure switches), ``config`` the
opaque ``GpuConfig``; ``deviceclass.yaml`` is the DeviceClass the driver ships.
"""

from pathlib import Path

from draflow.services.drivers.gpu_example.plugin import (
    CDI_CLASS,
    CDI_VENDOR,
    FailureSwitches,
    GpuExamplePlugin,
)
from draflow.services.drivers.gpu_example.slices import (
    DRIVER,
    SlicePlan,
    build_slices,
    gpu_devices,
    gpu_uuid,
    sync_pool,
)

DEVICE_CLASS_MANIFEST = Path(__file__).with_name("deviceclass.yaml")

__all__ = [
    "CDI_CLASS",
    "CDI_VENDOR",
    "DEVICE_CLASS_MANIFEST",
    "DRIVER",
    "FailureSwitches",
    "GpuExamplePlugin",
    "SlicePlan",
    "build_slices",
    "gpu_devices",
    "gpu_uuid",
    "sync_pool",
]
