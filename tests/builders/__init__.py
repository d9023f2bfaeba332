"""The one place tests build API objects: ``make_pod``, ``make_claim``, ``make_slice``, ``make_node``, …

One builder per object, one signature each, keyword-driven and explicit about what matters in a test:
``make_pod("p", template_claims={"gpu": "gpu-template"}, statuses={"gpu": "p-gpu"}, node_name="n1")``.
Defaults are one small cluster's: driver ``gpu.example.com``, DeviceClass ``gpu``, request ``gpu``,
pool = the node's name; uids are ``uid-<name>`` so tests can refer to them. A test that needs other
defaults passes them, or names a partial of its own (``def running(name): return make_pod(name,
phase="Running")``); it never builds the objects a second way.

* :mod:`tests.builders.core`: pods, containers, nodes (as a test writes them, or as the kubelet
  registers them), leases, taints, tolerations, quotas, node selectors, times.
* :mod:`tests.builders.resource`: devices, slices, classes, requests, claims, templates, allocations.
* :mod:`tests.builders.classic`: classic DRA (KEP 3063) claims and classes.
* :mod:`tests.builders.extended`: the special claim of extended resources (KEP 5004).
* :mod:`tests.builders.scheduler`: a scheduler core that has observed objects.
* :mod:`tests.builders.manifests`: objects from the repository's manifest files.
"""

from tests.builders.core import (
    T0,
    at,
    bound_to,
    make_container,
    make_lease,
    make_node,
    make_node_selector,
    make_pod,
    make_quota,
    make_taint,
    make_toleration,
    registered_node,
    stamp,
)
from tests.builders.resource import (
    DEVICE_CLASS,
    DRIVER,
    exact,
    first_available,
    make_allocation,
    make_claim,
    make_class,
    make_device,
    make_slice,
    make_template,
    pod_ref,
    pod_with_template_claim,
    with_status,
)

__all__ = [
    "DEVICE_CLASS",
    "DRIVER",
    "T0",
    "at",
    "bound_to",
    "exact",
    "first_available",
    "make_allocation",
    "make_claim",
    "make_class",
    "make_container",
    "make_device",
    "make_lease",
    "make_node",
    "make_node_selector",
    "make_pod",
    "make_quota",
    "make_slice",
    "make_taint",
    "make_template",
    "make_toleration",
    "pod_ref",
    "pod_with_template_claim",
    "registered_node",
    "stamp",
    "with_status",
]
