"""The classic DRA kinds (KEP-3063, ``cdi.k8s.io/v1alpha1``), as entries of the kind table.

The claim's registry kind is the internal token ``ClassicResourceClaim`` (so event types and
subjects never collide with resource.k8s.io's ``ResourceClaim``); manifests use
``kind: ResourceClaim`` with the cdi.k8s.io apiVersion. For the CLI its names are group-qualified
(``resourceclaims.cdi.k8s.io``, ``resourceclaim.cdi.k8s.io``) or the internal kind; the bare
``resourceclaims`` stays the structured kind. The ACME example driver's ``NodeGpuCapacity``
(``gpu.acme.com/v1alpha1``) is served here too, and KEP-4381's ``NodeResourceCapacity``.
"""

from __future__ import annotations

from draflow.events.api import acme_gpu_v1alpha1 as acme
from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api.registry import ResourceType, Served, WireType

CLASSIC_KINDS: tuple[Served, ...] = (
    Served(
        ResourceType(cv.GROUP, cv.CLASS_KIND, "resourceclasses", "resourceclass", (), False, cv.ResourceClass)
    ),
    Served(
        ResourceType(
            cv.GROUP,
            cv.CLAIM_KIND,
            "resourceclaims",
            "resourceclaim",
            (),
            True,
            cv.ResourceClaim,
            qualified_only=True,
        ),
        WireType(cv.API_VERSION, cv.WIRE_CLAIM_KIND, cv.ResourceClaim),
    ),
    # KEP-4381: what each node offers to the numeric models' builtin controllers.
    Served(
        ResourceType(
            nv.GROUP,
            nv.KIND,
            "noderesourcecapacities",
            "noderesourcecapacity",
            (),
            False,
            nv.NodeResourceCapacity,
        )
    ),
    # The gpu.acme.com example driver's per-node capacity object (a CRD in a real cluster).
    Served(
        ResourceType(
            acme.GROUP,
            "NodeGpuCapacity",
            "nodegpucapacities",
            "nodegpucapacity",
            (),
            False,
            acme.NodeGpuCapacity,
        )
    ),
)
