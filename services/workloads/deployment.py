"""Deployments: keep ``replicas`` pods of the current template, named like Kubernetes names them.

Kubernetes runs a Deployment through a ReplicaSet named ``<deployment>-<pod-template-hash>`` whose
pods are ``<replicaset>-<5 random>`` and carry the ``pod-template-hash`` label. draflow has no
ReplicaSet kind, so this controller plays both parts: the pods get the same names and label, and
their controller reference is the Deployment itself.

The template hash is computed like ``controller.ComputeHash`` (FNV-1a 32 bits, plus the
``collisionCount`` as 8 little-endian bytes, decimal string mapped through ``SafeEncodeString``),
but over msgspec's canonical JSON of the template instead of Go's ``spew`` dump of the Go struct
(which cannot be reproduced outside Go): deterministic and template-sensitive, not equal to
upstream's values.

A template change replaces the pods the ``Recreate`` way (old pods deleted first, new ones created
when none is left); the ``RollingUpdate`` surge/unavailability budget is not modelled.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from draflow.events.api.core_v1 import Pod, PodTemplateSpec
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.workloads_v1 import Deployment, DeploymentStatus
from draflow.services.dra.resourceclaim import is_pod_terminal
from draflow.services.runtime.naming import SuffixSource, hash_suffix, safe_encode, unique_generated_name
from draflow.services.workloads.actions import (
    CreatePod,
    DeletePod,
    UpdateDeploymentStatus,
    WorkloadAction,
    controlled_pods,
    is_active,
    owner_reference,
)

__all__ = ["POD_TEMPLATE_HASH_LABEL", "pod_template_hash", "scale_down_order", "sync_deployment"]

POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def _fnv1a32(data: bytes, value: int = _FNV_OFFSET) -> int:
    for byte in data:
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return value


def pod_template_hash(template: PodTemplateSpec, collision_count: int | None = None) -> str:
    """The ``pod-template-hash`` of a template (see the module docstring for the deviation)."""
    value = _fnv1a32(msgspec.json.encode(template, order="sorted"))
    if collision_count is not None:
        value = _fnv1a32((collision_count & 0xFFFFFFFF).to_bytes(4, "little") + bytes(4), value)
    return safe_encode(str(value))


_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def scale_down_order(pods: Iterable[Pod]) -> list[Pod]:
    """Pods to remove first when scaling down (after upstream ``ActivePodsWithRanks``, simplified):
    unscheduled before scheduled, Pending before Running, then the newest first."""
    newest_first = sorted(
        pods, key=lambda p: (p.metadata.creation_timestamp or "", p.metadata.name), reverse=True
    )
    return sorted(newest_first, key=lambda p: (bool(p.spec.node_name), _PHASE_RANK.get(p.status.phase, 1)))


def _new_pod(deploy: Deployment, template_hash: str, name: str, prefix: str) -> Pod:
    template = deploy.spec.template
    meta = deploy.metadata
    labels = {**template.metadata.labels, POD_TEMPLATE_HASH_LABEL: template_hash}
    return Pod(
        metadata=ObjectMeta(
            name=name,
            generate_name=prefix,
            namespace=meta.namespace,
            labels=labels,
            annotations=dict(template.metadata.annotations),
            owner_references=(owner_reference("apps/v1", "Deployment", meta),),
        ),
        spec=template.spec,
    )


def _status(deploy: Deployment, owned: list[Pod], template_hash: str, replicas: int) -> DeploymentStatus:
    active = [p for p in owned if is_active(p)]
    updated = [p for p in active if p.metadata.labels.get(POD_TEMPLATE_HASH_LABEL) == template_hash]
    ready = [p for p in active if p.status.phase == "Running"]
    return msgspec.structs.replace(
        deploy.status,
        observed_generation=deploy.metadata.generation,
        replicas=len(active),
        updated_replicas=len(updated),
        ready_replicas=len(ready),
        available_replicas=len(ready),
        unavailable_replicas=max(replicas - len(ready), 0),
    )


def sync_deployment(
    deploy: Deployment, pods: Iterable[Pod], *, at_seq: int, suffixes: SuffixSource = hash_suffix
) -> list[WorkloadAction]:
    """Create or delete pods so that ``spec.replicas`` pods of the current template exist.

    ``pods``: the pods of the deployment's namespace (only those it controls are considered).
    ``at_seq``: the stream sequence of the last event the decision consumed; it seeds the new
    pods' name suffixes, so names are not reused when the Deployment scales down and up again
    (upstream's suffixes are random), while the same log prefix still gives the same names.
    """
    meta = deploy.metadata
    all_pods = list(pods)
    owned = controlled_pods(meta, all_pods)
    if meta.deletion_timestamp is not None:
        # being deleted (foreground or orphan): its pods are the garbage collector's to delete or
        # orphan, as upstream's deployment controller only syncs status then
        return []
    replicas = 1 if deploy.spec.replicas is None else deploy.spec.replicas
    template_hash = pod_template_hash(deploy.spec.template, deploy.status.collision_count)
    actions: list[WorkloadAction] = []

    def delete(pod: Pod, reason: str) -> None:
        m = pod.metadata
        actions.append(DeletePod(namespace=m.namespace, name=m.name, uid=m.uid, reason=reason))

    old = [
        p
        for p in owned
        if p.metadata.labels.get(POD_TEMPLATE_HASH_LABEL) != template_hash and not is_pod_terminal(p)
    ]
    current = [
        p for p in owned if is_active(p) and p.metadata.labels.get(POD_TEMPLATE_HASH_LABEL) == template_hash
    ]
    if not deploy.spec.paused:
        if old:
            for pod in old:
                if pod.metadata.deletion_timestamp is None:
                    delete(pod, "pod template changed")
        elif len(current) < replicas:
            prefix = f"{meta.name}-{template_hash}-"
            taken = {p.metadata.name for p in all_pods}
            for n in range(replicas - len(current)):
                key = f"{meta.namespace}/{meta.uid}/{template_hash}/{at_seq}/{n}"
                name = unique_generated_name(prefix, key, taken, suffixes)
                taken.add(name)
                actions.append(CreatePod(pod=_new_pod(deploy, template_hash, name, prefix)))
        elif len(current) > replicas:
            for pod in scale_down_order(current)[: len(current) - replicas]:
                delete(pod, "scaled down")
    status = _status(deploy, owned, template_hash, replicas)
    if status != deploy.status:
        actions.append(
            UpdateDeploymentStatus(namespace=meta.namespace, name=meta.name, uid=meta.uid, status=status)
        )
    return actions
