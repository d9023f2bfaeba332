"""KEP-3063 shaped Pods and kind-less classic manifests: recognising, decoding, showing them.

The KEP's Pod is ``apiVersion: v1, kind: Pod`` but its claim fields differ from core/v1's:
``spec.resourceClaims[]`` entries carry ``resourceClaimName`` *or an inline* ``template``, and a
container lists its claims as plain strings (``resources.claims: ["gpu"]``) where core/v1 has
``[{name: gpu}]``. draflow keeps one Pod kind (the v1 Struct that scheduler, kubelet and claim
controller already use) and stores the KEP part beside it:

* a manifest is **KEP-shaped** when some ``spec.resourceClaims`` entry has a ``template`` or some
  (init) container's ``resources.claims`` holds a string;
* :func:`normalize_manifest` moves all its claim entries and the containers' claim lists into the
  annotation ``cdi.k8s.io/pod-resources`` (canonical JSON of :class:`PodClaims`) and leaves a
  plain v1 Pod without claims, so the structured DRA machinery ignores it; classic components
  read the annotation with :func:`pod_claims`;
* :func:`encode_classic` shows such a Pod in the KEP shape again (and a classic claim with its
  wire kind ``ResourceClaim``).

The KEP's ResourceClass example has no ``kind``; for ``apiVersion: cdi.k8s.io/v1alpha1`` the kind
is inferred (``driverName`` -> ResourceClass, ``spec`` -> ResourceClaim).
"""

from __future__ import annotations

from typing import Any

import msgspec

from events.api import classic_v1alpha1 as cv
from events.api import core_v1 as c1
from events.api.base import ApiStruct
from events.api.codec import decode_object, encode_object, identity, translate
from events.api.errors import DECODE, ApiError, FieldError

__all__ = [
    "POD_RESOURCES_ANNOTATION",
    "PodClaims",
    "decode_manifest",
    "encode_classic",
    "is_kep_pod",
    "normalize_manifest",
    "pod_claims",
]

POD_RESOURCES_ANNOTATION = "cdi.k8s.io/pod-resources"


class PodClaims(ApiStruct, frozen=True):
    """The KEP part of a Pod: its claim entries and which containers use which claim names."""

    resource_claims: tuple[cv.PodResourceClaim, ...] = ()
    containers: dict[str, tuple[str, ...]] = {}
    init_containers: dict[str, tuple[str, ...]] = {}


_CONTAINER_LISTS = (("containers", "containers"), ("initContainers", "init_containers"))


def _containers(spec: dict[str, Any], field: str) -> list[Any]:
    items = spec.get(field)
    return items if isinstance(items, list) else []


def _container_claims(container: Any) -> Any:
    if not isinstance(container, dict):
        return None
    resources = container.get("resources")
    return resources.get("claims") if isinstance(resources, dict) else None


def is_kep_pod(manifest: Any) -> bool:
    """A v1 Pod written in the KEP-3063 shape (inline templates or string container claims)."""
    if not isinstance(manifest, dict) or manifest.get("apiVersion") != "v1" or manifest.get("kind") != "Pod":
        return False
    spec = manifest.get("spec")
    if not isinstance(spec, dict):
        return False
    entries = spec.get("resourceClaims")
    if isinstance(entries, list) and any(isinstance(e, dict) and "template" in e for e in entries):
        return True
    for field, _ in _CONTAINER_LISTS:
        for container in _containers(spec, field):
            claims = _container_claims(container)
            if isinstance(claims, list) and any(isinstance(c, str) for c in claims):
                return True
    return False


def _error(manifest: Any, path: str, rule: str) -> ApiError:
    kind, ns, name = identity(manifest)
    return ApiError([FieldError(kind=kind, namespace=ns, name=name, path=path, type=DECODE, rule=rule)])


def _convert_kep_pod(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = dict(manifest["spec"])
    entries = spec.pop("resourceClaims", None) or []
    kind, ns, name = identity(manifest)
    try:
        claims = msgspec.convert({"resourceClaims": entries}, PodClaims)
    except msgspec.ValidationError as exc:
        err = translate(exc, {"resourceClaims": entries}, kind, ns, name)
        raise ApiError([msgspec.structs.replace(err, path=f"spec.{err.path}")]) from None
    used: dict[str, dict[str, tuple[str, ...]]] = {"containers": {}, "init_containers": {}}
    for field, attr in _CONTAINER_LISTS:
        fixed = []
        for i, container in enumerate(_containers(spec, field)):
            names = _container_claims(container)
            if names is None:
                fixed.append(container)
                continue
            at = f"spec.{field}[{i}].resources.claims"
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise _error(manifest, at, "a KEP-3063 Pod lists container claims as plain strings")
            cname = container.get("name")
            if not isinstance(cname, str) or not cname:
                rule = "Required value: a container with claims needs a name"
                raise _error(manifest, f"spec.{field}[{i}].name", rule)
            used[attr][cname] = tuple(names)
            resources = {k: v for k, v in container["resources"].items() if k != "claims"}
            fixed.append({**container, "resources": resources})
        if field in spec:
            spec[field] = fixed
    pod_claims_ = PodClaims(
        resource_claims=claims.resource_claims,
        containers=used["containers"],
        init_containers=used["init_containers"],
    )
    meta = dict(manifest.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    annotations[POD_RESOURCES_ANNOTATION] = msgspec.json.encode(pod_claims_).decode()
    meta["annotations"] = annotations
    return {**manifest, "metadata": meta, "spec": spec}


def normalize_manifest(manifest: Any) -> Any:
    """What ``decode_object`` can read: the kind-less classic documents get their kind, a KEP Pod
    its annotation form. Other manifests are returned unchanged. Raises ``ApiError``."""
    if not isinstance(manifest, dict):
        return manifest
    if manifest.get("apiVersion") == cv.API_VERSION and "kind" not in manifest:
        if "driverName" in manifest:
            return {**manifest, "kind": cv.CLASS_KIND}
        if "spec" in manifest:
            return {**manifest, "kind": cv.WIRE_CLAIM_KIND}
        rule = "Required value: kind not set (cannot infer it: no driverName or spec)"
        raise _error(manifest, "kind", rule)
    if is_kep_pod(manifest):
        return _convert_kep_pod(manifest)
    if (manifest.get("apiVersion"), manifest.get("kind")) in _WORKLOADS:
        return _convert_workload(manifest)
    return manifest


# Kinds whose spec.template is a PodTemplateSpec ("in production, a similar PodTemplateSpec in a
# Deployment will be used"): a KEP-shaped template gets the same annotation form.
_WORKLOADS = {("apps/v1", "Deployment"), ("batch/v1", "Job")}


def _convert_workload(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    if not isinstance(template, dict):
        return manifest
    _, ns, name = identity(manifest)
    as_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**(template.get("metadata") or {}), "name": name, "namespace": ns},
        "spec": template.get("spec"),
    }
    if not is_kep_pod(as_pod):
        return manifest
    try:
        converted = _convert_kep_pod(as_pod)
    except ApiError as exc:
        kind = manifest.get("kind", "")
        fixed = [
            msgspec.structs.replace(e, kind=kind, path=f"spec.template.{e.path}" if e.path else e.path)
            for e in exc.errors
        ]
        raise ApiError(fixed) from None
    meta = {k: v for k, v in converted["metadata"].items() if k not in ("name", "namespace")}
    new_template = {**template, "metadata": meta, "spec": converted["spec"]}
    return {**manifest, "spec": {**spec, "template": new_template}}  # type: ignore[dict-item]


def decode_manifest(manifest: Any) -> ApiStruct:
    """``decode_object`` that also reads the KEP-3063 documents (see :func:`normalize_manifest`)."""
    return decode_object(normalize_manifest(manifest))


def pod_claims(pod: c1.Pod) -> PodClaims | None:
    """The KEP claim entries of a Pod (None for a Pod without classic claims)."""
    raw = pod.metadata.annotations.get(POD_RESOURCES_ANNOTATION)
    if raw is None:
        return None
    return msgspec.json.decode(raw, type=PodClaims)


def _kep_pod_manifest(pod: c1.Pod, claims: PodClaims) -> dict[str, Any]:
    body = encode_object(pod)
    meta = body.get("metadata", {})
    annotations = {k: v for k, v in meta.get("annotations", {}).items() if k != POD_RESOURCES_ANNOTATION}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    spec = body.setdefault("spec", {})
    if claims.resource_claims:
        spec["resourceClaims"] = msgspec.json.decode(msgspec.json.encode(claims.resource_claims))
    for field, attr in _CONTAINER_LISTS:
        used: dict[str, tuple[str, ...]] = getattr(claims, attr)
        for container in spec.get(field, []):
            names = used.get(container.get("name", ""))
            if names:
                container.setdefault("resources", {})["claims"] = list(names)
    return body


def encode_classic(obj: ApiStruct) -> dict[str, Any]:
    """The manifest a user sees: wire kind for classic claims, KEP shape for KEP Pods."""
    if isinstance(obj, c1.Pod):
        claims = pod_claims(obj)
        if claims is not None:
            return _kep_pod_manifest(obj, claims)
    body = encode_object(obj)
    wire_kind = getattr(obj, "WIRE_KIND", None)
    if isinstance(wire_kind, str):
        body["kind"] = wire_kind
    return body
