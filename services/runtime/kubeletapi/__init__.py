"""The kubelet's plugin APIs, wire-compatible with Kubernetes' (``k8s.io/kubelet/pkg/apis/...``).

* ``pluginregistration/v1/api.proto``: ``pluginregistration.Registration`` (GetInfo,
  NotifyRegistrationStatus), served by every plugin on its socket in ``plugins_registry``;
* ``dra/v1/api.proto`` and ``dra/v1beta1/api.proto``: the DRA node service ``DRAPlugin``
  (NodePrepareResources, NodeUnprepareResources), served by a driver's kubelet plugin;
* ``gen``: how the ``api_pb2*.py`` modules are generated from them (grpcio-tools);
* ``wire``: the conversions between those messages and ``draflow.services.dra.kubeletplugin``'s
  values, shared by the kubelet (client) and the plugin library (server).

They live here, not in a service, because both sides use them: the kubelet calls plugins
(``draflow.services.kubelet.plugins``) and drivers serve them (``draflow.services.drivers.kubeletplugin``).
See docs/kubelet-plugins.md.
"""
