"""Validation of the core kinds draflow stores: Pod, Node, Namespace, ResourceQuota, and the pod
templates of Deployment and Job.

A subset of ``pkg/apis/core/validation``: every rule that shapes scheduling and DRA (containers,
resources and their claims, pod resourceClaims, tolerations, node name, node capacity, quota
names) with upstream's wording. Fields draflow keeps as opaque JSON (volumes, probes, env,
affinity, ...) are not validated.
"""

from __future__ import annotations

from collections.abc import Sequence

from draflow.events.api import core_v1 as c1
from draflow.events.api import workloads_v1 as w1
from draflow.events.api.base import QuantityValue
from draflow.events.api.meta import LabelSelector
from draflow.events.quantity import Quantity
from draflow.services.apiserver.admission.updates import (
    validate_deployment_update,
    validate_job_update,
    validate_node_update,
    validate_pod_update,
)
from draflow.services.dra.validation import names
from draflow.services.dra.validation.errs import Errs
from draflow.services.dra.validation.meta import validate_labels, validate_meta_update, validate_object_meta

RESTART_POLICIES = ("Always", "Never", "OnFailure")
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "PreferNoSchedule")
POD_PHASES = ("Failed", "Pending", "Running", "Succeeded", "Unknown")
QUOTA_SCOPES = (
    "BestEffort",
    "CrossNamespacePodAffinity",
    "NotBestEffort",
    "NotTerminating",
    "PriorityClass",
    "Terminating",
    "VolumeAttributesClass",
)
_EMPTY_KEY = 'operator must be Exists when `key` is empty, which means "match all values and all keys"'


def _quantity_nonnegative(errs: Errs, value: QuantityValue, path: str) -> Quantity:
    q = Quantity.parse(value)
    if q.sign < 0:
        errs.invalid(path, str(q), "must be greater than or equal to 0")
    return q


def _resources(errs: Errs, res: c1.ResourceRequirements, path: str, claim_names: set[str]) -> None:
    limits: dict[str, Quantity] = {}
    for name, value in res.limits.items():
        at = f"{path}.limits[{name}]"
        errs.messages(at, name, names.container_resource_name(name))
        limits[name] = q = _quantity_nonnegative(errs, value, at)
        if names.is_extended_resource_name(name) and not q.is_integer():
            errs.invalid(at, str(q), "must be an integer")
    for name, value in res.requests.items():
        at = f"{path}.requests[{name}]"
        errs.messages(at, name, names.container_resource_name(name))
        q = _quantity_nonnegative(errs, value, at)
        extended = names.is_extended_resource_name(name)
        if extended and not q.is_integer():
            errs.invalid(at, str(q), "must be an integer")
        overcommit = names.is_native_resource(name) and not names.is_hugepages(name)
        if name in limits:
            if q != limits[name] and not overcommit:
                errs.invalid(f"{path}.requests", str(q), f"must be equal to {name} limit")
            elif q > limits[name]:
                errs.invalid(f"{path}.requests", str(q), f"must be less than or equal to {name} limit")
        elif not overcommit:
            errs.required(f"{path}.limits", "Limit must be set for non overcommitable resources")
    seen: set[str] = set()
    for i, ref in enumerate(res.claims):
        at = f"{path}.claims[{i}]"
        if not ref.name:
            errs.required(at)
            continue
        key = f"{ref.name}/{ref.request}" if ref.request else ref.name
        if key in seen:
            errs.duplicate(at, key)
        seen.add(key)
        if ref.name not in claim_names:
            listed = ", ".join(sorted(claim_names)) if claim_names else ""
            detail = "must be one of the names in pod.spec.resourceClaims" + (
                f": {listed}" if listed else " which is empty"
            )
            errs.not_found(at, ref.name, detail)
        if ref.request:
            errs.messages(f"{at}.request", ref.request, names.dns1123_label(ref.request))


def _tolerations(errs: Errs, tolerations: Sequence[c1.Toleration], path: str) -> None:
    for i, t in enumerate(tolerations):
        at = f"{path}[{i}]"
        if t.key:
            errs.messages(f"{at}.key", t.key, names.qualified_name(t.key))
        elif t.operator != "Exists":
            errs.invalid(f"{at}.operator", t.operator, _EMPTY_KEY)
        if t.toleration_seconds is not None and t.effect != "NoExecute":
            errs.invalid(
                f"{at}.effect", t.effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"
            )
        if t.operator in ("", "Equal"):
            errs.messages(f"{at}.value", t.value, names.label_value(t.value))
        elif t.operator == "Exists":
            if t.value:
                errs.invalid(f"{at}.operator", t.value, "value must be empty when `operator` is 'Exists'")
        else:
            errs.not_supported(f"{at}.operator", t.operator, ("Equal", "Exists"))
        if t.effect and t.effect not in TAINT_EFFECTS:
            errs.not_supported(f"{at}.effect", t.effect, TAINT_EFFECTS)


def _pod_claims(errs: Errs, claims: Sequence[c1.PodResourceClaim], path: str, pod_name: str) -> set[str]:
    found: set[str] = set()
    for i, claim in enumerate(claims):
        at = f"{path}[{i}]"
        if not claim.name:
            errs.required(f"{at}.name")
        else:
            if claim.name in found:
                errs.duplicate(f"{at}.name", claim.name)
            errs.messages(f"{at}.name", claim.name, names.dns1123_label(claim.name))
            found.add(claim.name)
        by_name, by_template = claim.resource_claim_name, claim.resource_claim_template_name
        if by_name is not None and by_template is not None:
            errs.invalid_detail(
                at, "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified"
            )
        if by_name is None and by_template is None:
            errs.invalid_detail(at, "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`")
        if by_name is not None:
            errs.messages(f"{at}.resourceClaimName", by_name, names.dns1123_subdomain(by_name))
        if by_template is not None:
            errs.messages(
                f"{at}.resourceClaimTemplateName", by_template, names.dns1123_subdomain(by_template)
            )
            if pod_name and claim.name:
                final = f"{pod_name}-{claim.name}"
                for msg in names.dns1123_subdomain(final):
                    errs.invalid(f"{at}.name", final, "final ResourceClaim name: " + msg)
    return found


def validate_pod_spec(errs: Errs, spec: c1.PodSpec, path: str, pod_name: str = "") -> None:
    claim_names = _pod_claims(errs, spec.resource_claims, f"{path}.resourceClaims", pod_name)
    if not spec.containers:
        errs.required(f"{path}.containers")
    seen: set[str] = set()
    for field, containers in (("initContainers", spec.init_containers), ("containers", spec.containers)):
        for i, ctr in enumerate(containers):
            at = f"{path}.{field}[{i}]"
            if not ctr.name:
                errs.required(f"{at}.name")
            else:
                errs.messages(f"{at}.name", ctr.name, names.dns1123_label(ctr.name))
                if ctr.name in seen:
                    errs.duplicate(f"{at}.name", ctr.name)
                seen.add(ctr.name)
            if not ctr.image:
                errs.required(f"{at}.image")
            if ctr.restart_policy is not None and (field == "containers" or ctr.restart_policy != "Always"):
                errs.not_supported(f"{at}.restartPolicy", ctr.restart_policy, ("Always",))
            _resources(errs, ctr.resources, f"{at}.resources", claim_names)
    if spec.restart_policy and spec.restart_policy not in RESTART_POLICIES:
        errs.not_supported(f"{path}.restartPolicy", spec.restart_policy, RESTART_POLICIES)
    if spec.node_name:
        errs.messages(f"{path}.nodeName", spec.node_name, names.dns1123_subdomain(spec.node_name))
    validate_labels(errs, spec.node_selector, f"{path}.nodeSelector")
    _tolerations(errs, spec.tolerations, f"{path}.tolerations")
    if spec.resources is not None:
        if spec.resources.claims:
            errs.forbidden(f"{path}.resources.claims", "claims may not be set for pod-level resources")
        _resources(errs, spec.resources, f"{path}.resources", claim_names)
    group = spec.scheduling_group
    if group is not None and group.pod_group_name is not None:
        errs.messages(
            f"{path}.schedulingGroup.podGroupName",
            group.pod_group_name,
            names.dns1123_subdomain(group.pod_group_name),
        )
    for name, value in spec.overhead.items():
        _quantity_nonnegative(errs, value, f"{path}.overhead[{name}]")


def _pod_status(errs: Errs, pod: c1.Pod) -> None:
    st = pod.status
    if st.phase and st.phase not in POD_PHASES:
        errs.not_supported("status.phase", st.phase, POD_PHASES)
    # upstream validatePodResourceClaimStatuses: an entry per pod claim at most; an unset
    # resourceClaimName is allowed (no claim needed); a bad one is reported on ``.name`` (sic)
    claim_names = {c.name for c in pod.spec.resource_claims}
    seen: set[str] = set()
    for i, rcs in enumerate(st.resource_claim_statuses):
        at = f"status.resourceClaimStatuses[{i}]"
        if rcs.name not in claim_names:
            errs.invalid(f"{at}.name", rcs.name, "must match the name of an entry in `spec.resourceClaims`")
        if rcs.name in seen:
            errs.duplicate(f"{at}.name", rcs.name)
        seen.add(rcs.name)
        if rcs.resource_claim_name is not None:
            claim = rcs.resource_claim_name
            errs.messages(f"{at}.name", claim, names.dns1123_subdomain(claim))
    _extended_claim_status(errs, pod)


def _extended_claim_status(errs: Errs, pod: c1.Pod) -> None:
    """KEP-5004's rules, unlike resourceClaimStatuses': every mapping names a container of the
    pod (init or regular), an extended resource that container requests, and a DNS-label
    request name; no mapping twice; the claim name is required."""
    ext = pod.status.extended_resource_claim_status
    if ext is None:
        return
    path = "status.extendedResourceClaimStatus"
    requests = {c.name: c.resources.requests for c in (*pod.spec.init_containers, *pod.spec.containers)}
    if not ext.request_mappings:
        errs.required(f"{path}.requestMappings", "at least one request mapping is required")
    seen: set[tuple[str, str, str]] = set()
    for i, m in enumerate(ext.request_mappings):
        at = f"{path}.requestMappings[{i}]"
        if m.container_name not in requests:
            errs.invalid(
                f"{at}.containerName",
                m.container_name,
                "must match the name of an entry in spec.initContainers.name or spec.containers.name",
            )
        elif m.resource_name not in requests[m.container_name]:
            errs.invalid(
                f"{at}.resourceName",
                m.resource_name,
                "must match the extended resource name of an entry in "
                "spec.initContainers.resources.requests or spec.containers.resources.requests",
            )
        errs.messages(f"{at}.requestName", m.request_name, names.dns1123_label(m.request_name))
        key = (m.container_name, m.resource_name, m.request_name)
        if key in seen:
            errs.duplicate(at, f"{m.container_name}/{m.resource_name}/{m.request_name}")
        seen.add(key)
    if not ext.resource_claim_name:
        errs.required(f"{path}.resourceClaimName")
    else:
        errs.messages(
            f"{path}.resourceClaimName",
            ext.resource_claim_name,
            names.dns1123_subdomain(ext.resource_claim_name),
        )


def validate_pod(errs: Errs, obj: c1.Pod, old: c1.Pod | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=True, name_check=names.dns1123_subdomain)
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
    validate_pod_spec(errs, obj.spec, "spec", obj.metadata.name)
    if old is not None:
        validate_pod_update(errs, obj, old)
    _pod_status(errs, obj)


def validate_node(errs: Errs, obj: c1.Node, old: c1.Node | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=False, name_check=names.dns1123_subdomain)
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
        validate_node_update(errs, obj, old)
    seen: set[tuple[str, str]] = set()
    for i, t in enumerate(obj.spec.taints):
        at = f"spec.taints[{i}]"
        errs.messages(f"{at}.key", t.key, names.qualified_name(t.key))
        if t.value:
            errs.messages(f"{at}.value", t.value, names.label_value(t.value))
        if not t.effect:
            errs.required(f"{at}.effect")
        elif t.effect not in TAINT_EFFECTS:
            errs.not_supported(f"{at}.effect", t.effect, TAINT_EFFECTS)
        if (t.key, t.effect) in seen:
            errs.duplicate(at, f"{t.key}:{t.effect}")
        seen.add((t.key, t.effect))
    for field, values in (("capacity", obj.status.capacity), ("allocatable", obj.status.allocatable)):
        for name, value in values.items():
            at = f"status.{field}[{name}]"
            errs.messages(at, name, names.resource_name(name))
            q = _quantity_nonnegative(errs, value, at)
            if names.is_extended_resource_name(name) and not q.is_integer():
                errs.invalid(at, str(q), "must be an integer")  # devices come whole, as upstream


def validate_namespace(errs: Errs, obj: c1.Namespace, old: c1.Namespace | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=False, name_check=names.dns1123_label)
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
    for i, fin in enumerate(obj.spec.finalizers):
        errs.messages(f"spec.finalizers[{i}]", fin, names.qualified_name(fin))


def validate_resource_quota(errs: Errs, obj: c1.ResourceQuota, old: c1.ResourceQuota | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=True, name_check=names.dns1123_subdomain)
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
    for path, values in (
        ("spec.hard", obj.spec.hard),
        ("status.hard", obj.status.hard),
        ("status.used", obj.status.used),
    ):
        for name, value in values.items():
            at = f"{path}[{name}]"
            msgs = names.resource_name(name)
            errs.messages(at, name, msgs)
            if not msgs and "/" not in name and not names.is_standard_resource_name(name):
                errs.invalid(at, name, "must be a standard resource for quota")
            _quantity_nonnegative(errs, value, at)
    for i, scope in enumerate(obj.spec.scopes):
        if scope not in QUOTA_SCOPES:
            errs.not_supported(f"spec.scopes[{i}]", scope, QUOTA_SCOPES)


def _selector_matches(sel: LabelSelector, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in sel.match_labels.items()):
        return False
    for req in sel.match_expressions:
        has, value = req.key in labels, labels.get(req.key)
        ok = {
            "In": has and value in req.values,
            "NotIn": not has or value not in req.values,
            "Exists": has,
            "DoesNotExist": not has,
        }.get(req.operator, False)
        if not ok:
            return False
    return True


def _workload(
    errs: Errs, selector: LabelSelector | None, template: c1.PodTemplateSpec, required: bool
) -> None:
    if selector is None:
        if required:
            errs.required("spec.selector")
    elif not selector.match_labels and not selector.match_expressions:
        errs.invalid_detail("spec.selector", "empty selector is invalid for deployment")
    elif not _selector_matches(selector, template.metadata.labels):
        errs.invalid(
            "spec.template.metadata.labels",
            template.metadata.labels,
            "`selector` does not match template `labels`",
        )
    validate_labels(errs, template.metadata.labels, "spec.template.metadata.labels")
    validate_pod_spec(errs, template.spec, "spec.template.spec")


def validate_deployment(errs: Errs, obj: w1.Deployment, old: w1.Deployment | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=True, name_check=names.dns1123_subdomain)
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
    if obj.spec.replicas is not None and obj.spec.replicas < 0:
        errs.invalid("spec.replicas", obj.spec.replicas, "must be greater than or equal to 0")
    _workload(errs, obj.spec.selector, obj.spec.template, required=True)
    if old is not None:
        validate_deployment_update(errs, obj, old)
    policy = obj.spec.template.spec.restart_policy
    if policy and policy != "Always":
        errs.not_supported("spec.template.spec.restartPolicy", policy, ("Always",))


def validate_job(errs: Errs, obj: w1.Job, old: w1.Job | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=True, name_check=names.dns1123_subdomain)
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
    for field, value in (
        ("parallelism", obj.spec.parallelism),
        ("completions", obj.spec.completions),
        ("backoffLimit", obj.spec.backoff_limit),
    ):
        if value is not None and value < 0:
            errs.invalid(f"spec.{field}", value, "must be greater than or equal to 0")
    _workload(errs, obj.spec.selector, obj.spec.template, required=False)
    policy = obj.spec.template.spec.restart_policy
    if policy not in ("OnFailure", "Never"):
        errs.not_supported("spec.template.spec.restartPolicy", policy, ("Never", "OnFailure"))
    if old is not None:
        validate_job_update(errs, obj, old)
