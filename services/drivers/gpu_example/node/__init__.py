"""gpu.example.com's kubelet plugin process (``python -m draflow.services.drivers.gpu_example.node``)."""
