"""What the workloads controller decides, as data, and the shared pod helpers of its deciders."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from draflow.events.api.core_v1 import Pod
from draflow.events.api.meta import ObjectMeta, OwnerReference
from draflow.events.api.workloads_v1 import DeploymentStatus
from draflow.services.dra.resourceclaim import is_pod_terminal

__all__ = [
    "CreatePod",
    "DeletePod",
    "UpdateDeploymentStatus",
    "UpdateJobStatus",
    "WorkloadAction",
    "controlled_pods",
    "is_active",
    "owner_reference",
]


class _Action(msgspec.Struct, frozen=True, kw_only=True, tag=True, tag_field="action"):
    pass


class CreatePod(_Action, frozen=True, kw_only=True):
    """Create ``pod`` (name already generated with the controller's suffix source)."""

    pod: Pod


class DeletePod(_Action, frozen=True, kw_only=True):
    namespace: str
    name: str
    uid: str
    reason: str


class UpdateJobStatus(_Action, frozen=True, kw_only=True):
    """Replace the Job's status (batch/v1 JobStatus as JSON)."""

    namespace: str
    name: str
    uid: str
    status: dict[str, Any]


class UpdateDeploymentStatus(_Action, frozen=True, kw_only=True):
    namespace: str
    name: str
    uid: str
    status: DeploymentStatus


WorkloadAction = CreatePod | DeletePod | UpdateJobStatus | UpdateDeploymentStatus


def owner_reference(api_version: str, kind: str, meta: ObjectMeta) -> OwnerReference:
    """The controller reference a workload's pods carry (deletion blocked until they are gone)."""
    return OwnerReference(
        api_version=api_version,
        kind=kind,
        name=meta.name,
        uid=meta.uid,
        controller=True,
        block_owner_deletion=True,
    )


def controlled_pods(owner: ObjectMeta, pods: Iterable[Pod]) -> list[Pod]:
    """Pods whose controller reference is ``owner`` (same namespace)."""
    out = []
    for pod in pods:
        if pod.metadata.namespace != owner.namespace:
            continue
        if any(ref.controller and ref.uid == owner.uid for ref in pod.metadata.owner_references):
            out.append(pod)
    return out


def is_active(pod: Pod) -> bool:
    """Counts toward a workload's running pods: not terminal and not being deleted."""
    return pod.metadata.deletion_timestamp is None and not is_pod_terminal(pod)
