"""Defaulting as the API server applies it before validation (``SetDefaults_*`` upstream).

Separate from validation so the apiserver can store exactly what Kubernetes would store:
allocationMode ExactCount and count 1 for claim requests, toleration operator Equal, the
request's namespace for namespaced kinds (``default`` unless told otherwise), no namespace for
cluster-scoped ones, and the Pod / Deployment / Job defaults that matter to scheduling
(restartPolicy, requests copied from limits, replicas, parallelism, ...).
"""

from __future__ import annotations

from typing import Any, TypeVar

from msgspec.structs import replace

from draflow.events.api import core_v1 as c1
from draflow.events.api import resource_v1 as r1
from draflow.events.api import workloads_v1 as w1
from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import object_meta
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.registry import lookup_resource

__all__ = ["apply_defaults"]

S = TypeVar("S", bound=ApiStruct)


def _tolerations(items: tuple[r1.DeviceToleration, ...]) -> tuple[r1.DeviceToleration, ...]:
    if all(t.operator for t in items):
        return items
    return tuple(t if t.operator else replace(t, operator="Equal") for t in items)


def _mode_count(mode: str, count: int) -> tuple[str, int]:
    mode = mode or "ExactCount"
    if mode == "ExactCount" and count == 0:
        count = 1
    return mode, count


def _exact(req: r1.ExactDeviceRequest) -> r1.ExactDeviceRequest:
    mode, count = _mode_count(req.allocation_mode, req.count)
    tols = _tolerations(req.tolerations)
    if (mode, count, tols) == (req.allocation_mode, req.count, req.tolerations):
        return req
    return replace(req, allocation_mode=mode, count=count, tolerations=tols)


def _sub(req: r1.DeviceSubRequest) -> r1.DeviceSubRequest:
    mode, count = _mode_count(req.allocation_mode, req.count)
    tols = _tolerations(req.tolerations)
    if (mode, count, tols) == (req.allocation_mode, req.count, req.tolerations):
        return req
    return replace(req, allocation_mode=mode, count=count, tolerations=tols)


def claim_spec_defaults(spec: r1.ResourceClaimSpec) -> r1.ResourceClaimSpec:
    requests = tuple(
        replace(
            r,
            exactly=_exact(r.exactly) if r.exactly is not None else None,
            first_available=tuple(_sub(s) for s in r.first_available),
        )
        for r in spec.devices.requests
    )
    return replace(spec, devices=replace(spec.devices, requests=requests))


def _containers(items: tuple[c1.Container, ...]) -> tuple[c1.Container, ...]:
    out = []
    for ctr in items:
        res = ctr.resources
        missing = {k: v for k, v in res.limits.items() if k not in res.requests}
        if missing:
            res = replace(res, requests={**res.requests, **missing})
        image = ctr.image
        latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        out.append(
            replace(
                ctr,
                resources=res,
                termination_message_path=ctr.termination_message_path or "/dev/termination-log",
                termination_message_policy=ctr.termination_message_policy or "File",
                image_pull_policy=ctr.image_pull_policy
                or ("Always" if latest and "@" not in image else "IfNotPresent"),
            )
        )
    return tuple(out)


def pod_spec_defaults(spec: c1.PodSpec) -> c1.PodSpec:
    return replace(
        spec,
        containers=_containers(spec.containers),
        init_containers=_containers(spec.init_containers),
        restart_policy=spec.restart_policy or "Always",
        dns_policy=spec.dns_policy or "ClusterFirst",
        scheduler_name=spec.scheduler_name or "default-scheduler",
        termination_grace_period_seconds=(
            30 if spec.termination_grace_period_seconds is None else spec.termination_grace_period_seconds
        ),
        enable_service_links=True if spec.enable_service_links is None else spec.enable_service_links,
    )


def _template(t: c1.PodTemplateSpec) -> c1.PodTemplateSpec:
    return replace(t, spec=pod_spec_defaults(t.spec))


def _meta(meta: ObjectMeta, namespaced: bool, namespace: str) -> ObjectMeta:
    if namespaced and not meta.namespace:
        return replace(meta, namespace=namespace)
    if not namespaced and meta.namespace:
        return replace(meta, namespace="")
    return meta


def apply_defaults(obj: S, namespace: str = "default") -> S:
    """The object as the API server would store it after defaulting (a new frozen struct)."""
    info = lookup_resource(obj.KIND)
    namespaced = info.namespaced if info is not None else False
    changes: dict[str, Any] = {"metadata": _meta(object_meta(obj), namespaced, namespace)}
    if isinstance(obj, r1.ResourceClaim):
        changes["spec"] = claim_spec_defaults(obj.spec)
    elif isinstance(obj, r1.ResourceClaimTemplate):
        changes["spec"] = replace(obj.spec, spec=claim_spec_defaults(obj.spec.spec))
    elif isinstance(obj, c1.Pod):
        changes["spec"] = pod_spec_defaults(obj.spec)
        if not obj.status.phase:
            changes["status"] = replace(obj.status, phase="Pending")
    elif isinstance(obj, c1.Namespace):
        if not obj.spec.finalizers:
            changes["spec"] = replace(obj.spec, finalizers=("kubernetes",))
        if not obj.status.phase:
            changes["status"] = replace(obj.status, phase="Active")
    elif isinstance(obj, w1.Deployment):
        s = obj.spec
        changes["spec"] = replace(
            s,
            replicas=1 if s.replicas is None else s.replicas,
            revision_history_limit=10 if s.revision_history_limit is None else s.revision_history_limit,
            progress_deadline_seconds=600
            if s.progress_deadline_seconds is None
            else s.progress_deadline_seconds,
            strategy=s.strategy
            or {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            template=_template(s.template),
        )
    elif isinstance(obj, w1.Job):
        js = obj.spec
        both_unset = js.parallelism is None and js.completions is None
        changes["spec"] = replace(
            js,
            parallelism=1 if js.parallelism is None else js.parallelism,
            completions=1 if both_unset else js.completions,
            backoff_limit=6 if js.backoff_limit is None else js.backoff_limit,
            completion_mode=js.completion_mode or "NonIndexed",
            suspend=False if js.suspend is None else js.suspend,
            template=_template(js.template),
        )
    return replace(obj, **changes)


# Kinds whose status is written through the status subresource upstream: on create the API server
# drops whatever status the manifest carries, on a main-resource update it keeps the stored one.
# Node is the exception upstream (its status may be set on create) and is not listed.
_STATUS_RESET = (
    r1.ResourceClaim,
    r1.DeviceTaintRule,
    c1.Pod,
    c1.ResourceQuota,
    c1.Namespace,
    w1.Deployment,
    w1.Job,
)


def prepare_for_create(obj: S) -> S:
    """Drop a user-supplied status (``kubectl apply`` of a dumped object), as upstream's
    strategies do in PrepareForCreate; defaulting then fills in the initial status."""
    if isinstance(obj, _STATUS_RESET):
        return replace(obj, status=type(obj.status)())
    return obj


def prepare_for_update(obj: S, old: S) -> S:
    """A main-resource update cannot change status: the stored one is kept."""
    if isinstance(obj, _STATUS_RESET) and isinstance(old, _STATUS_RESET):
        return replace(obj, status=old.status)
    return obj
