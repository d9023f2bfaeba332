"""The kubelet's PodResources gRPC API (KEP-3695), ``v1.PodResourcesLister``, wire-compatible with
Kubernetes' (``k8s.io/kubelet/pkg/apis/podresources/v1``).

* ``v1/api.proto``: draflow's copy of the schema; ``v1/api_pb2*.py`` generated from it (``gen``);
* ``view``: what the API reports, as plain values, from the kubelet's state (pure);
* ``encode``: those values as protobuf messages;
* ``provider``: one kubelet's answers, serialized and cached until its state changes;
* ``server``: the gRPC service on the kubelet's unix socket, ``ratelimit`` and ``metrics`` with it.

See docs/podresources.md.
"""
