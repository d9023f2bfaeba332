"""What an update may change: the immutability rules of Pod, Deployment, Job and Node.

Upstream's ``ValidatePodUpdate`` (``pkg/apis/core/validation``), ``ValidateJobSpecUpdate``
(``pkg/apis/batch/validation``), the apps/v1 Deployment strategy's selector check and
``ValidateNodeUpdate``, with their wording. A pod's spec is immutable but for container images,
``activeDeadlineSeconds`` (set, or lowered), added tolerations (``tolerationSeconds`` may change),
removed scheduling gates and, while the pod is gated, added node selectors and node affinity;
any other difference is refused with ``spec: Forbidden: pod updates may not change fields other
than ...`` followed by the fields that differ (upstream prints a Go diff there; ours lists the
wire paths, ``-`` stored and ``+`` sent).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from msgspec.structs import replace

from events.api import core_v1 as c1
from events.api import workloads_v1 as w1
from services.dra.validation.errs import Errs

__all__ = [
    "POD_UPDATABLE_FIELDS",
    "spec_diff",
    "validate_deployment_update",
    "validate_job_update",
    "validate_node_update",
    "validate_pod_update",
]

MAX_INT32 = 2**31 - 1
POD_UPDATABLE_FIELDS = (
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
)
_NO_NODE_CHANGE = 'node updates may not change {} except from "" to valid'
_TERMS = "requiredDuringSchedulingIgnoredDuringExecution"
_TOLERATION_CHANGED = "existing toleration can not be modified except its tolerationSeconds"
_TERMS_COUNT = "no additions/deletions to non-empty NodeSelectorTerms list are allowed"


def _wire(value: Any) -> Any:
    """The JSON form of a struct (camelCase, defaults omitted), for diffs and error values."""
    return msgspec.json.decode(msgspec.json.encode(value))


def _show(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def _diff(old: Any, new: Any, path: str, out: list[str]) -> None:
    if old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(k for k in new if k not in old)]:
            _diff(old.get(key), new.get(key), f"{path}.{key}", out)
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _diff(a, b, f"{path}[{i}]", out)
        return
    if old is not None:
        out.append(f"- {path}: {_show(old)}")
    if new is not None:
        out.append(f"+ {path}: {_show(new)}")


def spec_diff(old: Any, new: Any, path: str = "spec") -> list[str]:
    """One ``- path: old`` / ``+ path: new`` line per leaf that differs (absent sides omitted)."""
    out: list[str] = []
    _diff(_wire(old), _wire(new), path, out)
    return out


# -- Pod ---------------------------------------------------------------------------------------------


def _container_updates(
    errs: Errs, new: tuple[c1.Container, ...], old: tuple[c1.Container, ...], path: str
) -> bool:
    """Images of the same containers; False (stop checking) when containers came or went."""
    if len(new) != len(old):
        errs.forbidden(path, "pod updates may not add or remove containers")
        return False
    for i, ctr in enumerate(new):
        if not ctr.image:
            errs.required(f"{path}[{i}].image")
        elif ctr.image.strip() != ctr.image:
            errs.invalid(f"{path}[{i}].image", ctr.image, "must not have leading or trailing whitespace")
    return True


def _active_deadline(errs: Errs, new: int | None, old: int | None) -> bool:
    """Set from nothing, or lowered; False (stop checking) on the two refusals upstream returns on."""
    path = "spec.activeDeadlineSeconds"
    if new is not None:
        if new < 0 or new > MAX_INT32:
            errs.invalid(path, new, f"must be between 0 and {MAX_INT32}, inclusive")
            return False
        if old is not None and old < new:
            errs.invalid(path, new, "must be less than or equal to previous value")
            return False
    elif old is not None:
        errs.invalid(path, None, "must not update from a positive integer to nil value")
    return True


def _only_added_tolerations(
    errs: Errs, new: tuple[c1.Toleration, ...], old: tuple[c1.Toleration, ...]
) -> None:
    for t in old:
        if not any(replace(t, toleration_seconds=n.toleration_seconds) == n for n in new):
            errs.forbidden("spec.tolerations", _TOLERATION_CHANGED)
            return


def _gate_names(gates: tuple[Any, ...]) -> list[str]:
    return [str(g.get("name", "")) if isinstance(g, dict) else "" for g in gates]


def _only_deleted_gates(errs: Errs, new: tuple[Any, ...], old: tuple[Any, ...]) -> None:
    before = set(_gate_names(old))
    for i, name in enumerate(_gate_names(new)):
        if name not in before:
            errs.forbidden(
                f"spec.schedulingGates[{i}].name",
                f"only deletion is allowed, but found new scheduling gate '{name}'",
            )


def _node_affinity(affinity: Any) -> dict[str, Any] | None:
    if not isinstance(affinity, dict):
        return None
    na = affinity.get("nodeAffinity")
    return na if isinstance(na, dict) else None


def _only_added_terms(errs: Errs, new: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
    """A gated pod's required node affinity: the same terms, each only extended at its end."""
    old_terms = ((old or {}).get(_TERMS) or {}).get("nodeSelectorTerms") or []
    if not old_terms:
        return
    new_terms = ((new or {}).get(_TERMS) or {}).get("nodeSelectorTerms") or []
    path = f"spec.affinity.nodeAffinity.{_TERMS}.nodeSelectorTerms"
    if len(new_terms) != len(old_terms):
        errs.invalid(path, new_terms, _TERMS_COUNT)
        return
    for i, (a, b) in enumerate(zip(new_terms, old_terms, strict=True)):
        for key in ("matchExpressions", "matchFields"):
            before, after = (b or {}).get(key) or [], (a or {}).get(key) or []
            if after[: len(before)] != before:
                errs.invalid(f"{path}[{i}]", a, "only additions are allowed (no mutations or deletions)")
                break


def _gated_changes(errs: Errs, munged: c1.PodSpec, old: c1.PodSpec) -> c1.PodSpec:
    """While a pod is gated, node selectors and node affinity may be added to (upstream's
    scheduling-directives mutability); returns ``munged`` with those taken from ``old``."""
    if munged.node_selector != old.node_selector:
        if any(munged.node_selector.get(k) != v for k, v in old.node_selector.items()):
            errs.invalid(
                "spec.nodeSelector",
                munged.node_selector,
                "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
            )
        munged = replace(munged, node_selector=old.node_selector)
    new_na, old_na = _node_affinity(munged.affinity), _node_affinity(old.affinity)
    if new_na != old_na:
        _only_added_terms(errs, new_na, old_na)
        rest = {k: v for k, v in (munged.affinity or {}).items() if k != "nodeAffinity"}
        if old_na is not None:
            rest["nodeAffinity"] = old_na
        munged = replace(munged, affinity=rest or (None if old.affinity is None else {}))
    return munged


def _old_images(new: tuple[c1.Container, ...], old: tuple[c1.Container, ...]) -> tuple[c1.Container, ...]:
    return tuple(replace(c, image=o.image) for c, o in zip(new, old, strict=True))


def validate_pod_update(errs: Errs, new: c1.Pod, old: c1.Pod) -> None:
    """The spec changes a pod update may make (metadata and the new spec are checked elsewhere)."""
    ns, os_ = new.spec, old.spec
    if not _container_updates(errs, ns.containers, os_.containers, "spec.containers"):
        return
    if not _container_updates(errs, ns.init_containers, os_.init_containers, "spec.initContainers"):
        return
    if not _active_deadline(errs, ns.active_deadline_seconds, os_.active_deadline_seconds):
        return
    _only_added_tolerations(errs, ns.tolerations, os_.tolerations)
    if ns.scheduling_gates:
        _only_deleted_gates(errs, ns.scheduling_gates, os_.scheduling_gates)
    if ns == os_:
        return
    munged = replace(
        ns,
        containers=_old_images(ns.containers, os_.containers),
        init_containers=_old_images(ns.init_containers, os_.init_containers),
        active_deadline_seconds=os_.active_deadline_seconds,
        scheduling_gates=os_.scheduling_gates,
        tolerations=os_.tolerations,
    )
    old_grace, new_grace = os_.termination_grace_period_seconds, munged.termination_grace_period_seconds
    if old_grace is not None and old_grace < 0 and new_grace == 1:
        munged = replace(munged, termination_grace_period_seconds=old_grace)
    if os_.scheduling_gates:
        munged = _gated_changes(errs, munged, os_)
    if munged != os_:
        lines = spec_diff(os_, munged)
        detail = "pod updates may not change fields other than " + ",".join(POD_UPDATABLE_FIELDS)
        errs.forbidden("spec", "\n".join([detail, *lines]))


# -- Deployment, Job ---------------------------------------------------------------------------------


def _immutable(errs: Errs, path: str, new: Any, old: Any) -> None:
    if new != old:
        errs.invalid(path, _wire(new), "field is immutable")


def validate_deployment_update(errs: Errs, new: w1.Deployment, old: w1.Deployment) -> None:
    """apps/v1: the selector is immutable (the rest of the spec may change: a new rollout)."""
    _immutable(errs, "spec.selector", new.spec.selector, old.spec.selector)


def _job_started(job: w1.Job) -> bool:
    return bool(job.status.get("startTime")) if isinstance(job.status, dict) else False


def _job_template(errs: Errs, new: w1.Job, old: w1.Job) -> None:
    """Immutable, except the scheduling directives of a suspended Job that never started
    (node affinity, node selector, tolerations, labels, annotations, scheduling gates)."""
    template, before = new.spec.template, old.spec.template
    if old.spec.suspend and not _job_started(old):
        affinity = before.spec.affinity
        new_na = _node_affinity(template.spec.affinity)
        if template.spec.affinity is None and affinity is not None:
            rest = {k: v for k, v in affinity.items() if k != "nodeAffinity"}
            affinity = rest or None
        elif template.spec.affinity is not None:
            affinity = {k: v for k, v in (affinity or {}).items() if k != "nodeAffinity"}
            if new_na is not None:
                affinity["nodeAffinity"] = new_na
        spec = replace(
            before.spec,
            affinity=affinity,
            node_selector=template.spec.node_selector,
            tolerations=template.spec.tolerations,
            scheduling_gates=template.spec.scheduling_gates,
        )
        meta = replace(
            before.metadata, labels=template.metadata.labels, annotations=template.metadata.annotations
        )
        before = replace(before, metadata=meta, spec=spec)
    if template != before:
        errs.invalid_detail("spec.template", "field is immutable")


def validate_job_update(errs: Errs, new: w1.Job, old: w1.Job) -> None:
    s, o = new.spec, old.spec
    if s.completion_mode == "Indexed" and s.completions != o.completions:
        if s.completions is not None and s.completions != s.parallelism:
            errs.invalid(
                "spec.completions", s.completions, "can only be modified in tandem with spec.parallelism"
            )
    else:
        _immutable(errs, "spec.completions", s.completions, o.completions)
    _immutable(errs, "spec.selector", s.selector, o.selector)
    _job_template(errs, new, old)
    for field, a, b in (
        ("completionMode", s.completion_mode, o.completion_mode),
        ("podFailurePolicy", s.pod_failure_policy, o.pod_failure_policy),
        ("backoffLimitPerIndex", s.backoff_limit_per_index, o.backoff_limit_per_index),
        ("managedBy", s.managed_by, o.managed_by),
        ("successPolicy", s.success_policy, o.success_policy),
    ):
        _immutable(errs, f"spec.{field}", a, b)


# -- Node --------------------------------------------------------------------------------------------


def _cidrs(spec: c1.NodeSpec) -> tuple[str, ...]:
    """v1's podCIDR is podCIDRs[0] (upstream's internal type has only the list)."""
    return spec.pod_cidrs or ((spec.pod_cidr,) if spec.pod_cidr else ())


def validate_node_update(errs: Errs, new: c1.Node, old: c1.Node) -> None:
    """podCIDRs and providerID are set once (by the node IPAM and the cloud provider)."""
    before, after = _cidrs(old.spec), _cidrs(new.spec)
    if before and after != before:
        errs.forbidden("spec.podCIDRs", _NO_NODE_CHANGE.format("podCIDR"))
    if old.spec.provider_id and new.spec.provider_id != old.spec.provider_id:
        errs.forbidden("spec.providerID", _NO_NODE_CHANGE.format("providerID"))
