"""Classic DRA (KEP 3063) objects: resource classes and claims with opaque parameters."""

from __future__ import annotations

from typing import Any

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.meta import ObjectMeta


def make_classic_class(name: str, driver: str) -> cv.ResourceClass:
    return cv.ResourceClass(metadata=ObjectMeta(name=name, uid=f"uid-{name}"), driver_name=driver)


def make_classic_claim(
    name: str,
    cls: str,
    parameters: object = None,
    *,
    mode: str = cv.DELAYED,
    namespace: str = "default",
    **status: Any,
) -> cv.ResourceClaim:
    """A claim as the apiserver stores it on create (mode, phase ``Pending`` and user limit 1
    defaulted); ``status``: fields of the status to set on top."""
    return cv.ResourceClaim(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}"),
        spec=cv.ResourceClaimSpec(resource_class_name=cls, parameters=parameters, allocation_mode=mode),
        status=cv.ResourceClaimStatus(**{"phase": cv.PENDING, "user_limit": 1, **status}),
    )
