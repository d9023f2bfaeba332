"""The simulated gpu.nvidia.com kubelet plugin process
(``python -m draflow.services.drivers.nvidia_sim.node``)."""
