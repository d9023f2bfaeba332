"""``gpu.acme.com``: the KEP-3063 partial-GPU story as a classic driver.

Each node's kubelet plugin publishes the node's GPUs and their memory in a driver-owned
:class:`NodeGpuCapacity` object named after the node (the KEP's "CRD object named after the
node"). The controller plugin packs claims asking ``memory: 2Gi`` onto the first GPU (by name)
that still has room, so they share a GPU until it is full, and tells the scheduler which
potential nodes cannot hold all of a pod's claims.
"""

from draflow.events.api.acme_gpu_v1alpha1 import GpuInfo, NodeGpuCapacity, NodeGpuCapacitySpec
from draflow.services.drivers.acme_gpu.controller import DRIVER_NAME, AcmeGpuController, create_plugin
from draflow.services.drivers.acme_gpu.node import AcmeGpuNodePlugin
from draflow.services.drivers.acme_gpu.params import AcmeParameters, parse_parameters

__all__ = [
    "DRIVER_NAME",
    "AcmeGpuController",
    "AcmeGpuNodePlugin",
    "AcmeParameters",
    "GpuInfo",
    "NodeGpuCapacity",
    "NodeGpuCapacitySpec",
    "create_plugin",
    "parse_parameters",
]
