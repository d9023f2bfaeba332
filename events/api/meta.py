"""ObjectMeta and the small shared types (metav1 and core/v1) that several API groups embed.

Timestamps stay strings (RFC 3339, as on the wire): the loader keeps YAML from turning them into
datetimes, and the validator checks their format.
"""

from __future__ import annotations

from typing import Any

import msgspec

from draflow.events.api.base import ApiStruct, Int64

__all__ = [
    "Condition",
    "LabelSelector",
    "LabelSelectorRequirement",
    "ManagedFieldsEntry",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "ObjectMeta",
    "OwnerReference",
]


class OwnerReference(ApiStruct, frozen=True):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ManagedFieldsEntry(ApiStruct, frozen=True):
    """Server-side-apply bookkeeping; accepted and kept, never interpreted."""

    manager: str = ""
    operation: str = ""
    api_version: str = ""
    time: str | None = None
    fields_type: str = ""
    fields_v1: dict[str, Any] | None = msgspec.field(default=None, name="fieldsV1")
    subresource: str = ""


class ObjectMeta(ApiStruct, frozen=True):
    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    self_link: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: Int64 = 0
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: Int64 | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_references: tuple[OwnerReference, ...] = ()
    finalizers: tuple[str, ...] = ()
    managed_fields: tuple[ManagedFieldsEntry, ...] = ()


class Condition(ApiStruct, frozen=True):
    """metav1.Condition."""

    type: str = ""
    status: str = ""
    observed_generation: Int64 = 0
    last_transition_time: str | None = None
    reason: str = ""
    message: str = ""


class LabelSelectorRequirement(ApiStruct, frozen=True):
    key: str = ""
    operator: str = ""
    values: tuple[str, ...] = ()


class LabelSelector(ApiStruct, frozen=True):
    match_labels: dict[str, str] = {}
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()


class NodeSelectorRequirement(ApiStruct, frozen=True):
    """core/v1 NodeSelectorRequirement (operators In, NotIn, Exists, DoesNotExist, Gt, Lt)."""

    key: str = ""
    operator: str = ""
    values: tuple[str, ...] = ()


class NodeSelectorTerm(ApiStruct, frozen=True):
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class NodeSelector(ApiStruct, frozen=True):
    """core/v1 NodeSelector: the terms are ORed, the requirements inside a term ANDed."""

    node_selector_terms: tuple[NodeSelectorTerm, ...] = ()
