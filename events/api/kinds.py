"""The table of served kinds (registered into ``events.api.registry`` on first use).

Names and scopes as ``kubectl api-resources`` prints them: the resource.k8s.io kinds have no
short names upstream; core ones do (po, no, ns, quota, deploy).
"""

from __future__ import annotations

from events.api import conversion_resource as conv
from events.api import coordination_v1 as co1
from events.api import core_v1 as c1
from events.api import resource_old as old
from events.api import resource_v1 as r1
from events.api import workloads_v1 as w1
from events.api.registry import ResourceType, WireType, register

_R = "resource.k8s.io"
_B2, _B1, _A3 = f"{_R}/v1beta2", f"{_R}/v1beta1", f"{_R}/v1alpha3"

register(
    ResourceType(_R, "DeviceClass", "deviceclasses", "deviceclass", (), False, r1.DeviceClass),
    WireType(_B2, "DeviceClass", r1.DeviceClass),
    WireType(_B1, "DeviceClass", r1.DeviceClass),
    WireType(_A3, "DeviceClass", r1.DeviceClass),
)
register(
    ResourceType(_R, "ResourceSlice", "resourceslices", "resourceslice", (), False, r1.ResourceSlice),
    WireType(_B2, "ResourceSlice", r1.ResourceSlice),
    WireType(_B1, "ResourceSlice", old.ResourceSliceV1beta1, conv.slice_from_v1beta1),
    WireType(_A3, "ResourceSlice", old.ResourceSliceV1alpha3, conv.slice_from_v1alpha3),
)
register(
    ResourceType(_R, "ResourceClaim", "resourceclaims", "resourceclaim", (), True, r1.ResourceClaim),
    WireType(_B2, "ResourceClaim", r1.ResourceClaim),
    WireType(_B1, "ResourceClaim", old.ResourceClaimV1beta1, conv.claim_from_v1beta1),
    WireType(_A3, "ResourceClaim", old.ResourceClaimV1beta1, conv.claim_from_v1beta1),
)
register(
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
)
register(
    ResourceType(_R, "DeviceTaintRule", "devicetaintrules", "devicetaintrule", (), False, r1.DeviceTaintRule),
    WireType(_B2, "DeviceTaintRule", r1.DeviceTaintRule),
    WireType(_A3, "DeviceTaintRule", r1.DeviceTaintRule),
)

register(ResourceType("", "Namespace", "namespaces", "namespace", ("ns",), False, c1.Namespace))
register(ResourceType("", "Node", "nodes", "node", ("no",), False, c1.Node))
register(ResourceType("", "Pod", "pods", "pod", ("po",), True, c1.Pod))
register(
    ResourceType("", "ResourceQuota", "resourcequotas", "resourcequota", ("quota",), True, c1.ResourceQuota)
)
register(ResourceType("apps", "Deployment", "deployments", "deployment", ("deploy",), True, w1.Deployment))
register(ResourceType("batch", "Job", "jobs", "job", (), True, w1.Job))
register(ResourceType("coordination.k8s.io", "Lease", "leases", "lease", (), True, co1.Lease))
