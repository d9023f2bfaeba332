"""Small constructors for API objects used by the allocator unit and property tests."""

from __future__ import annotations

from typing import Any

from events.api.core_v1 import Node
from events.api.meta import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectMeta
from events.api.resource_v1 import (
    CELDeviceSelector,
    Device,
    DeviceAttribute,
    DeviceClaim,
    DeviceClass,
    DeviceClassSpec,
    DeviceConstraint,
    DeviceRequest,
    DeviceSelector,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceClaimSpec,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)

DRIVER = "driver-a"


def node(name: str = "node-1", **labels: str) -> Node:
    return Node(metadata=ObjectMeta(name=name, labels=labels or {"region": "region-1"}))


def device(name: str, **attrs: Any) -> Device:
    attributes = {}
    for key, value in attrs.items():
        if isinstance(value, bool):
            attributes[key] = DeviceAttribute(bool_=value)
        elif isinstance(value, int):
            attributes[key] = DeviceAttribute(int_=value)
        else:
            attributes[key] = DeviceAttribute(string=str(value))
    return Device(name=name, attributes=attributes)


def slice_(
    name: str,
    devices: list[Device],
    *,
    node_name: str | None = "node-1",
    pool: str = "pool-1",
    generation: int = 1,
    count: int = 1,
    selector: NodeSelector | None = None,
    all_nodes: bool | None = None,
    driver: str = DRIVER,
) -> ResourceSlice:
    return ResourceSlice(
        metadata=ObjectMeta(name=name),
        spec=ResourceSliceSpec(
            driver=driver,
            pool=ResourcePool(name=pool, generation=generation, resource_slice_count=count),
            node_name=node_name if selector is None and not all_nodes else None,
            node_selector=selector,
            all_nodes=all_nodes,
            devices=tuple(devices),
        ),
    )


def device_class(name: str = "class-a", expression: str = f'device.driver == "{DRIVER}"') -> DeviceClass:
    sel = DeviceSelector(cel=CELDeviceSelector(expression=expression))
    return DeviceClass(metadata=ObjectMeta(name=name), spec=DeviceClassSpec(selectors=(sel,)))


def request(
    name: str, count: int = 1, mode: str = "ExactCount", cls: str = "class-a", admin: bool = False
) -> DeviceRequest:
    return DeviceRequest(
        name=name,
        exactly=ExactDeviceRequest(
            device_class_name=cls, allocation_mode=mode, count=count, admin_access=True if admin else None
        ),
    )


def claim(
    name: str, *requests: DeviceRequest, constraints: tuple[DeviceConstraint, ...] = ()
) -> ResourceClaim:
    return ResourceClaim(
        metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"),
        spec=ResourceClaimSpec(devices=DeviceClaim(requests=requests, constraints=constraints)),
    )


def label_selector(*reqs: tuple[str, str, tuple[str, ...]]) -> NodeSelector:
    return NodeSelector(
        node_selector_terms=(
            NodeSelectorTerm(
                match_expressions=tuple(
                    NodeSelectorRequirement(key=k, operator=op, values=v) for k, op, v in reqs
                )
            ),
        )
    )
