"""The DRA rules several services share (Kubernetes' ``k8s.io/dynamic-resource-allocation``).

Pure: nothing here does I/O or imports anything of ours but ``events`` (``tests/test_layers.py``
guards it), so the apiserver, the scheduler, the kubelet, the controllers, the drivers and the
CLI all decide with the same code:

* ``cel``: the CEL compiler and runtime for device selectors;
* ``structured``: the structured-parameters allocator (KEP-4381);
* ``extended``: extended resources backed by DRA (KEP-5004): names, class mapping, pod demand,
  the special claim;
* ``quota``: ResourceQuota usage of claims and pods, and quota scopes;
* ``resourceclaim``: which claims a pod uses, ``reservedFor``, owner references, claim naming,
  terminal pods (upstream ``resourceclaim``);
* ``claimactions``: the claim controller's and the kubelet's claim writes, as data;
* ``kubeletplugin``: the kubelet <-> node plugin API a driver implements;
* ``validation``: the object validation rules every writer checks (the apiserver's admission,
  and the services that append status changes themselves);
* ``classic``: classic DRA (KEP-3063): claim transitions, the pods' claims, the control-plane
  driver plugin Protocol, validation.
"""
