"""Names KEP-5004 gives meaning to: resource-name predicates, annotations, quota keys.

Kept in one small module because the scheduler, the kubelet, quota admission and the quota
reconciler must agree on every spelling (upstream spreads them over ``core/v1`` and
``resource/v1`` constants and ``pkg/scheduler/util``). ``is_extended_resource_name`` and the
``requests.`` prefix are the resource-name validation's (``draflow.services.dra.validation.names``).
"""

from __future__ import annotations

from typing import Final

from draflow.services.dra.validation.names import REQUESTS_PREFIX, is_extended_resource_name

__all__ = [
    "CLAIM_COUNT_KEY",
    "DEVICES_SUFFIX",
    "DEVICE_CLASS_PREFIX",
    "EXTENDED_RESOURCE_CLAIM_ANNOTATION",
    "IN_MEMORY_CLAIM_NAME",
    "REQUESTS_PREFIX",
    "devices_key",
    "implicit_name",
    "is_dra_extended_resource_name",
    "is_extended_resource_name",
    "requests_key",
]

# resource/v1 ResourceDeviceClassPrefix: every class is reachable as this prefix + its name.
DEVICE_CLASS_PREFIX: Final = "deviceclass.resource.kubernetes.io/"
# resource/v1 ExtendedResourceClaimAnnotation, value "true" on the special claim.
EXTENDED_RESOURCE_CLAIM_ANNOTATION: Final = "resource.kubernetes.io/extended-resource-claim"
# Upstream's name for the special claim before PreBind creates it; deliberately not a valid
# object name so it can never collide with a stored claim.
IN_MEMORY_CLAIM_NAME: Final = "<extended-resources>"

# Quota keys (core/v1 constants and the object-count name of resourceclaims.resource.k8s.io).
CLAIM_COUNT_KEY: Final = "count/resourceclaims.resource.k8s.io"
DEVICES_SUFFIX: Final = ".deviceclass.resource.k8s.io/devices"


def is_dra_extended_resource_name(name: str) -> bool:
    """Scheduler util ``IsDRAExtendedResourceName``: an extended name or an implicit class name.

    The implicit names contain ``kubernetes.io/`` and so count as "native" to the plain helper;
    upstream accepts them by prefix, so does this.
    """
    return is_extended_resource_name(name) or name.startswith(DEVICE_CLASS_PREFIX)


def implicit_name(class_name: str) -> str:
    """``deviceclass.resource.kubernetes.io/<class>``."""
    return DEVICE_CLASS_PREFIX + class_name


def devices_key(class_name: str) -> str:
    """``<class>.deviceclass.resource.k8s.io/devices`` (the claim evaluator's per-class key)."""
    return class_name + DEVICES_SUFFIX


def requests_key(resource_name: str) -> str:
    """``requests.<resource>``; for implicit names ``requests.deviceclass.resource.kubernetes.io/<class>``."""
    return REQUESTS_PREFIX + resource_name
