"""A simulated NVIDIA GPU DRA driver (``gpu.nvidia.com``) so NVIDIA's manifests run on draflow.

``devices`` is what a node has and the ResourceSlice the kubelet publishes for it (GH200 GPUs,
some split into ``1g.12gb`` MIG instances); ``plugin`` is the node plugin the kubelet calls to
prepare and unprepare claims (CDI specs). A kubelet started with ``--nvidia-gpus N
[--nvidia-mig-gpus K]`` hosts both, as the NVIDIA driver's kubelet plugin publishes its own node's
slice: no control-plane process is needed.
"""

from draflow.services.drivers.nvidia_sim.devices import (
    DRIVER,
    LayoutError,
    NodeLayout,
    node_devices,
    node_slice,
)
from draflow.services.drivers.nvidia_sim.plugin import NvidiaGpuPlugin

__all__ = ["DRIVER", "LayoutError", "NodeLayout", "NvidiaGpuPlugin", "node_devices", "node_slice"]
