"""Node groups and their fictional nodes (KEP-4381, "Simulation with CA").

A node group's template is a Node plus the ResourceSlices local to it. It comes from an existing
node (its Node and slices, as the log holds them) or, to scale from zero, from a file. A new node
``<group>-<i>`` is the template with every mention of the template node's name replaced: the
Node's name and hostname label, each slice's ``nodeName``, its pool name (a pool named after the
node gets the new name, another pool name is prefixed with it, so pools never merge) and slice
name; its NodeResourceCapacity objects (numeric parameters) get the new ``nodeName`` and a name
made the same way, their instances unchanged. The annotation
``autoscaling.k8s.io/node-resource-capacity`` names the node (or template) the capacity was
taken from, as the KEP asks Cluster Autoscaler to do. Slices that are not local to the node
(``allNodes``, a node selector) are shared and never cloned: adding a node does not add
network-attached devices.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec

from draflow.events.api.core_v1 import Node
from draflow.events.api.numeric_v1alpha2 import NodeResourceCapacity
from draflow.events.api.resource_v1 import ResourceSlice

__all__ = [
    "CAPACITY_ANNOTATION",
    "HOSTNAME_LABEL",
    "NodeGroup",
    "NodeTemplate",
    "TemplateError",
    "capacity_names",
    "instantiate",
    "instantiate_capacities",
    "template_from_objects",
]

CAPACITY_ANNOTATION = "autoscaling.k8s.io/node-resource-capacity"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Taints a node carries because of its own life, not its kind: a new node starts without them
# (Cluster Autoscaler sanitizes template nodes the same way).
_TRANSIENT_TAINTS = (
    "node.kubernetes.io/unschedulable",
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "ToBeDeletedByClusterAutoscaler",
    "DeletionCandidateOfClusterAutoscaler",
)


class TemplateError(ValueError):
    """A template that cannot make nodes (one line, naming the object and the field)."""


@dataclass(frozen=True, slots=True)
class NodeTemplate:
    """A Node, its node-local slices and its NodeResourceCapacity objects; ``origin`` names where
    it came from (node or file)."""

    node: Node
    slices: tuple[ResourceSlice, ...]
    origin: str
    capacities: tuple[NodeResourceCapacity, ...] = ()  # numeric parameters (KEP-4381)


@dataclass(slots=True)
class NodeGroup:
    """A group new nodes are opened in, at most ``max_nodes`` (None: no limit)."""

    name: str
    template: NodeTemplate
    max_nodes: int | None = None
    opened: int = 0

    def node_name(self, i: int) -> str:
        return f"{self.name}-{i}"

    def full(self) -> bool:
        return self.max_nodes is not None and self.opened >= self.max_nodes


def template_from_objects(
    node: Node,
    slices: Iterable[ResourceSlice],
    origin: str,
    capacities: Iterable[NodeResourceCapacity] = (),
) -> NodeTemplate:
    """The template of ``node``: the slices and NodeResourceCapacity objects published for it
    (``nodeName``), in name order.
    Slices of other nodes and shared slices are left out; a slice for a node other than the
    template's is refused (a template file must describe one node)."""
    name = node.metadata.name
    if not name:
        raise TemplateError(f"{origin}: Node: metadata.name: Required value")
    own: list[ResourceSlice] = []
    for slc in sorted(slices, key=lambda s: s.metadata.name):
        if slc.spec.node_name == name:
            own.append(slc)
    caps = tuple(c for c in sorted(capacities, key=lambda c: c.metadata.name) if c.node_name == name)
    return NodeTemplate(node, tuple(own), origin, caps)


def _rename(text: str, old: str, new: str) -> str:
    return text.replace(old, new) if old in text else f"{new}-{text}"


def _pool_name(pool: str, old: str, new: str) -> str:
    return pool.replace(old, new) if old in pool else f"{new}/{pool}"


def instantiate(template: NodeTemplate, new_name: str) -> tuple[Node, list[ResourceSlice]]:
    """A fictional node ``new_name`` made from ``template`` (see the module docstring)."""
    node = template.node
    old = node.metadata.name
    labels = dict(node.metadata.labels)
    if labels.get(HOSTNAME_LABEL) == old or HOSTNAME_LABEL not in labels:
        labels[HOSTNAME_LABEL] = new_name
    annotations = {**node.metadata.annotations, CAPACITY_ANNOTATION: old}
    meta = msgspec.structs.replace(
        node.metadata,
        name=new_name,
        uid=f"simulated-{new_name}",
        labels=labels,
        annotations=annotations,
        resource_version="",
        creation_timestamp=None,
    )
    taints = tuple(t for t in node.spec.taints if t.key not in _TRANSIENT_TAINTS)
    spec = msgspec.structs.replace(node.spec, unschedulable=False, taints=taints, provider_id="")
    new_node = msgspec.structs.replace(node, metadata=meta, spec=spec)
    slices: list[ResourceSlice] = []
    for slc in template.slices:
        pool = msgspec.structs.replace(slc.spec.pool, name=_pool_name(slc.spec.pool.name, old, new_name))
        slice_spec = msgspec.structs.replace(slc.spec, node_name=new_name, pool=pool)
        slice_meta = msgspec.structs.replace(
            slc.metadata,
            name=_rename(slc.metadata.name, old, new_name),
            uid=f"simulated-{new_name}-{slc.metadata.name}",
            resource_version="",
            owner_references=(),
        )
        slices.append(msgspec.structs.replace(slc, metadata=slice_meta, spec=slice_spec))
    return new_node, slices


def slice_names(slices: Sequence[ResourceSlice]) -> list[str]:
    return [s.metadata.name for s in slices]


def instantiate_capacities(template: NodeTemplate, new_name: str) -> list[NodeResourceCapacity]:
    """The template's NodeResourceCapacity objects for the fictional node ``new_name``: its
    ``nodeName`` and object name replaced, instance ids kept (they are per node)."""
    old = template.node.metadata.name
    out: list[NodeResourceCapacity] = []
    for cap in template.capacities:
        meta = msgspec.structs.replace(
            cap.metadata,
            name=_rename(cap.metadata.name, old, new_name),
            uid=f"simulated-{new_name}-{cap.metadata.name}",
            resource_version="",
            owner_references=(),
            annotations={**cap.metadata.annotations, CAPACITY_ANNOTATION: cap.metadata.name},
        )
        out.append(msgspec.structs.replace(cap, metadata=meta, node_name=new_name))
    return out


def capacity_names(capacities: Sequence[NodeResourceCapacity]) -> list[str]:
    return [c.metadata.name for c in capacities]
