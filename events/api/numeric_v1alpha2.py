"""KEP-4381's ``NodeResourceCapacity`` (``resource.k8s.io/v1alpha2``): what a node offers, per driver.

The kubelet writes one (or, for very many instances, several) per node and driver, from what the
driver's node plugin reports. Each instance carries the capacity type of a numeric model as an
opaque JSON ``data`` with its ``apiVersion`` and ``kind``: the kubelet never interprets it, the
scheduler's builtin controller for that model does. Cluster-scoped, top-level fields (no
``spec``), so ``--field-selector nodeName=...,driverName=...`` selects by node and driver.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from draflow.events.api.base import ApiStruct
from draflow.events.api.meta import ObjectMeta

__all__ = ["API_VERSION", "GROUP", "KIND", "NodeResourceCapacity", "NodeResourceInstance"]

GROUP = "resource.k8s.io"
API_VERSION = f"{GROUP}/v1alpha2"
KIND = "NodeResourceCapacity"


class NodeResourceInstance(ApiStruct, frozen=True):
    """One discrete resource instance; ``id`` is unique per node and driver."""

    id: str = ""
    api_version: str = ""  # of the capacity type in ``data``
    kind: str = ""
    data: Any = None  # runtime.RawExtension: the capacity type's JSON


class NodeResourceCapacity(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = KIND
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    node_name: str = ""
    driver_name: str = ""
    instances: tuple[NodeResourceInstance, ...] = ()
