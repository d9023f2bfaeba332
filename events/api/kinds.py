"""The table of served kinds: every kind draflow serves is listed here (``draflow.events.api.registry``
indexes it on first use).

Names and scopes as ``kubectl api-resources`` prints them: the resource.k8s.io kinds have no
short names upstream; core ones do (po, no, ns, quota, deploy). Each entry is the storage
version's ``ResourceType`` and the extra wire versions it is served in; the classic DRA kinds
(KEP-3063) come last, from ``draflow.events.api.classic_kinds``.
"""

from __future__ import annotations

from draflow.events.api import apiextensions_v1 as ax1
from draflow.events.api import conversion_resource as conv
from draflow.events.api import coordination_v1 as co1
from draflow.events.api import core_v1 as c1
from draflow.events.api import resource_old as old
from draflow.events.api import resource_v1 as r1
from draflow.events.api import workloads_v1 as w1
from draflow.events.api.classic_kinds import CLASSIC_KINDS
from draflow.events.api.registry import ResourceType, Served, WireType

_R = "resource.k8s.io"
_B2, _B1, _A3 = f"{_R}/v1beta2", f"{_R}/v1beta1", f"{_R}/v1alpha3"

KINDS: tuple[Served, ...] = (
    Served(
        ResourceType(_R, "DeviceClass", "deviceclasses", "deviceclass", (), False, r1.DeviceClass),
        WireType(_B2, "DeviceClass", r1.DeviceClass),
        WireType(_B1, "DeviceClass", r1.DeviceClass),
        WireType(_A3, "DeviceClass", r1.DeviceClass),
    ),
    Served(
        ResourceType(_R, "ResourceSlice", "resourceslices", "resourceslice", (), False, r1.ResourceSlice),
        WireType(_B2, "ResourceSlice", r1.ResourceSlice),
        WireType(_B1, "ResourceSlice", old.ResourceSliceV1beta1, conv.slice_from_v1beta1),
        WireType(_A3, "ResourceSlice", old.ResourceSliceV1alpha3, conv.slice_from_v1alpha3),
    ),
    Served(
        ResourceType(_R, "ResourceClaim", "resourceclaims", "resourceclaim", (), True, r1.ResourceClaim),
        WireType(_B2, "ResourceClaim", r1.ResourceClaim),
        WireType(_B1, "ResourceClaim", old.ResourceClaimV1beta1, conv.claim_from_v1beta1),
        WireType(_A3, "ResourceClaim", old.ResourceClaimV1beta1, conv.claim_from_v1beta1),
    ),
    Served(
        ResourceType(
            _R,
            "ResourceClaimTemplate",
            "resourceclaimtemplates",
            "resourceclaimtemplate",
            (),
            True,
            r1.ResourceClaimTemplate,
        ),
        WireType(_B2, "ResourceClaimTemplate", r1.ResourceClaimTemplate),
        WireType(_B1, "ResourceClaimTemplate", old.ResourceClaimTemplateV1beta1, conv.template_from_v1beta1),
        WireType(_A3, "ResourceClaimTemplate", old.ResourceClaimTemplateV1beta1, conv.template_from_v1beta1),
    ),
    Served(
        ResourceType(
            _R, "DeviceTaintRule", "devicetaintrules", "devicetaintrule", (), False, r1.DeviceTaintRule
        ),
        WireType(_B2, "DeviceTaintRule", r1.DeviceTaintRule),
        WireType(_A3, "DeviceTaintRule", r1.DeviceTaintRule),
    ),
    Served(ResourceType("", "Namespace", "namespaces", "namespace", ("ns",), False, c1.Namespace)),
    Served(ResourceType("", "Node", "nodes", "node", ("no",), False, c1.Node)),
    Served(ResourceType("", "Pod", "pods", "pod", ("po",), True, c1.Pod)),
    Served(
        ResourceType(
            "", "ResourceQuota", "resourcequotas", "resourcequota", ("quota",), True, c1.ResourceQuota
        )
    ),
    Served(ResourceType("apps", "Deployment", "deployments", "deployment", ("deploy",), True, w1.Deployment)),
    Served(ResourceType("batch", "Job", "jobs", "job", (), True, w1.Job)),
    Served(ResourceType("coordination.k8s.io", "Lease", "leases", "lease", (), True, co1.Lease)),
    Served(
        ResourceType(
            ax1.CRD_GROUP,
            "CustomResourceDefinition",
            "customresourcedefinitions",
            "customresourcedefinition",
            ("crd", "crds"),
            False,
            ax1.CustomResourceDefinition,
        )
    ),
    *CLASSIC_KINDS,
)
