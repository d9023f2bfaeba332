"""Small constructors for the node lifecycle tests: nodes as a kubelet registers them, leases, pods."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from msgspec.structs import replace

from events.api.coordination_v1 import Lease
from events.api.core_v1 import Node, NodeCondition, Pod, PodCondition, PodSpec, PodStatus, Taint, Toleration
from events.api.meta import ObjectMeta
from services.kubelet.lease import lease_object
from services.kubelet.node import node_object, rfc3339
from services.node_lifecycle.taints import UNREACHABLE

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(s: float) -> datetime:
    """``T0`` + ``s`` seconds."""
    return T0 + timedelta(seconds=s)


def node(
    name: str,
    *,
    registered: float = 0.0,
    labels: dict[str, str] | None = None,
    taints: Sequence[Taint] = (),
    ready: str | None = "True",
    unschedulable: bool = False,
    conditions: Sequence[NodeCondition] = (),
) -> Node:
    """A Node as its kubelet registered it at ``at(registered)`` (``ready=None``: no conditions)."""
    n = node_object(name, at(registered), labels=labels)
    meta = replace(n.metadata, uid=f"uid-{name}", creation_timestamp=rfc3339(at(registered)))
    conds = tuple(n.status.conditions) if ready is not None else ()
    if ready is not None and ready != "True":
        conds = tuple(replace(c, status=ready) if c.type == "Ready" else c for c in conds)
    for extra in conditions:
        conds = (*(c for c in conds if c.type != extra.type), extra)
    return replace(
        n,
        metadata=meta,
        spec=replace(n.spec, taints=tuple(taints), unschedulable=unschedulable),
        status=replace(n.status, conditions=conds),
    )


def lease(name: str, renewed: float) -> Lease:
    return lease_object(name, at(renewed), 40, f"uid-{name}")


def taint(
    key: str = UNREACHABLE, effect: str = "NoExecute", added: float | None = 0.0, value: str = ""
) -> Taint:
    return Taint(
        key=key, value=value, effect=effect, time_added=rfc3339(at(added)) if added is not None else None
    )


def toleration(
    key: str = UNREACHABLE, seconds: int | None = None, effect: str = "NoExecute", operator: str = "Exists"
) -> Toleration:
    return Toleration(key=key, operator=operator, effect=effect, toleration_seconds=seconds)


def pod(
    name: str,
    node_name: str = "a",
    *,
    tolerations: Sequence[Toleration] = (),
    bound: float | None = None,
    created: float = 0.0,
    deleting: bool = False,
    phase: str = "Running",
) -> Pod:
    conditions: tuple[PodCondition, ...] = ()
    if bound is not None:
        conditions = (
            PodCondition(type="PodScheduled", status="True", last_transition_time=rfc3339(at(bound))),
        )
    meta = ObjectMeta(
        name=name,
        namespace="ns",
        uid=f"uid-{name}",
        creation_timestamp=rfc3339(at(created)),
        deletion_timestamp=rfc3339(at(created)) if deleting else None,
    )
    return Pod(
        metadata=meta,
        spec=PodSpec(node_name=node_name, tolerations=tuple(tolerations)),
        status=PodStatus(phase=phase, conditions=conditions),
    )
