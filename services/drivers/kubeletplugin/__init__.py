"""The kubelet-plugin library: a DRA driver's node side as its own process, over gRPC.

Like ``k8s.io/dynamic-resource-allocation/kubeletplugin``: a driver writes an object with
``driver_name``, ``node_prepare_resources`` and ``node_unprepare_resources``
(``draflow.services.dra.kubeletplugin.DRAPlugin``) and a ``__main__`` that calls ``run_plugin``; the
library serves the DRA node service (v1 and/or v1beta1) and plugin registration on unix sockets
(``server``), lets the driver read claims from the log (``host``), and adds failure switches with an
admin endpoint for tests and demos (``faults``, ``admin``). Import from the modules (this package
imports nothing, so a driver's pure parts can use ``faults`` without loading gRPC). See
docs/kubelet-plugins.md.
"""
