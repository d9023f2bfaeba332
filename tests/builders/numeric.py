"""KEP-4381 numeric parameters: the frobnicator class, node capacity, vendor parameter objects
(``ClaimParameters``, the CRD in examples/numeric), and KEP-shaped pods using numeric claims
(manifests, as a user applies them)."""

from __future__ import annotations

from typing import Any

FROB_DRIVER = "frobnicator.example.com"
FROB_API = f"{FROB_DRIVER}/v1alpha1"
COUNTER_TEMPLATE = """kind: Parameters
apiVersion: counter.dra.config.k8s.io/v1alpha1
Required: {{object.spec.numberOfFrobnicators}}
"""


def frob_parameters(name: str, count: int, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    """The KEP's ``ClaimParameters`` object (the CRD of examples/numeric must be served)."""
    return {
        "apiVersion": FROB_API,
        "kind": "ClaimParameters",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"numberOfFrobnicators": count, **spec},
    }


def numeric_class(
    name: str = "frob", template: str = COUNTER_TEMPLATE, *, shareable: bool = False
) -> dict[str, Any]:
    return {
        "apiVersion": "cdi.k8s.io/v1alpha1",
        "kind": "ResourceClass",
        "metadata": {"name": name},
        "driverName": FROB_DRIVER,
        "numericParameters": [
            {
                "apiVersion": FROB_API,
                "kind": "ClaimParameters",
                "celTemplate": template,
                "shareable": shareable,
            }
        ],
    }


def node_capacity(node: str, count: int, *, instance: str = "frob-0") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "kind": "NodeResourceCapacity",
        "metadata": {"name": f"{node}-{FROB_DRIVER}"},
        "nodeName": node,
        "driverName": FROB_DRIVER,
        "instances": [
            {
                "id": instance,
                "apiVersion": "counter.dra.config.k8s.io/v1alpha1",
                "kind": "Capacity",
                "data": {"count": count},
            }
        ],
    }


def numeric_claim(name: str, parameters: str, *, cls: str = "frob", mode: str = "Delayed") -> dict[str, Any]:
    return {
        "apiVersion": "cdi.k8s.io/v1alpha1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "resourceClassName": cls,
            "allocationMode": mode,
            "parametersRef": {"apiGroup": FROB_DRIVER, "kind": "ClaimParameters", "name": parameters},
        },
    }


def kep_pod(name: str, claim: str, node_name: str = "", scheduler: str = "") -> dict[str, Any]:
    """A KEP-shaped pod using the existing claim ``claim`` as ``frob``."""
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "frob", "resourceClaimName": claim}],
        "containers": [{"name": "c", "image": "busybox", "resources": {"claims": ["frob"]}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }
