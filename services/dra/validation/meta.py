"""ObjectMeta validation (``ValidateObjectMeta`` and friends in apimachinery / core)."""

from __future__ import annotations

from collections.abc import Callable

from draflow.events.api.meta import ObjectMeta
from draflow.services.dra.validation import names
from draflow.services.dra.validation.errs import Errs

NameCheck = Callable[[str], list[str]]
TOTAL_ANNOTATION_SIZE = 256 * 1024
_STANDARD_FINALIZERS = frozenset({"kubernetes", "orphan", "foregroundDeletion"})


def _prefix(check: NameCheck) -> NameCheck:
    """generateName is validated as a name whose trailing '-' is allowed."""
    return lambda value: check(value[:-1] + "a" if value.endswith("-") else value)


def validate_labels(errs: Errs, labels: dict[str, str], path: str) -> None:
    for key, value in labels.items():
        errs.messages(path, key, names.qualified_name(key))
        errs.messages(path, value, names.label_value(value))


def validate_annotations(errs: Errs, annotations: dict[str, str], path: str) -> None:
    total = 0
    for key, value in annotations.items():
        errs.messages(path, key, names.qualified_name(key.lower()))
        total += len(key) + len(value)
    if total > TOTAL_ANNOTATION_SIZE:
        errs.too_long(path, TOTAL_ANNOTATION_SIZE)


def validate_object_meta(
    errs: Errs, meta: ObjectMeta, *, namespaced: bool, name_check: NameCheck, path: str = "metadata"
) -> None:
    if meta.generate_name:
        errs.messages(f"{path}.generateName", meta.generate_name, _prefix(name_check)(meta.generate_name))
    if not meta.name:
        if not meta.generate_name:
            errs.required(f"{path}.name", "name or generateName is required")
    else:
        errs.messages(f"{path}.name", meta.name, name_check(meta.name))
    if namespaced:
        if not meta.namespace:
            errs.required(f"{path}.namespace")
        else:
            errs.messages(f"{path}.namespace", meta.namespace, names.dns1123_label(meta.namespace))
    elif meta.namespace:
        errs.forbidden(f"{path}.namespace", "not allowed on this type")
    if meta.generation < 0:
        errs.invalid(f"{path}.generation", meta.generation, "must be greater than or equal to 0")
    validate_labels(errs, meta.labels, f"{path}.labels")
    validate_annotations(errs, meta.annotations, f"{path}.annotations")
    controllers = 0
    for i, ref in enumerate(meta.owner_references):
        at = f"{path}.ownerReferences[{i}]"
        if not ref.api_version:
            errs.invalid(f"{at}.apiVersion", ref.api_version, "version must not be empty")
        if not ref.kind:
            errs.invalid(f"{at}.kind", ref.kind, "must not be empty")
        if not ref.name:
            errs.invalid(f"{at}.name", ref.name, "name must not be empty")
        if not ref.uid:
            errs.invalid(f"{at}.uid", ref.uid, "uid must not be empty")
        controllers += bool(ref.controller)
    if controllers > 1:
        errs.invalid_detail(f"{path}.ownerReferences", "Only one reference can have Controller set to true")
    if "orphan" in meta.finalizers and "foregroundDeletion" in meta.finalizers:
        errs.invalid(
            f"{path}.finalizers",
            list(meta.finalizers),
            "finalizer orphan and foregroundDeletion cannot be both set",
        )
    for i, fin in enumerate(meta.finalizers):
        at = f"{path}.finalizers[{i}]"
        msgs = names.qualified_name(fin)
        errs.messages(at, fin, msgs)
        if not msgs and "/" not in fin and fin not in _STANDARD_FINALIZERS:
            errs.invalid(at, fin, "name is neither a standard finalizer name nor is it fully qualified")
    for field, value in (
        ("creationTimestamp", meta.creation_timestamp),
        ("deletionTimestamp", meta.deletion_timestamp),
    ):
        if value is not None and not names.is_rfc3339(value):
            errs.invalid(f"{path}.{field}", value, "must be an RFC 3339 timestamp")


def validate_template_meta(errs: Errs, meta: ObjectMeta, path: str) -> None:
    """A template's metadata may only carry labels and annotations."""
    validate_labels(errs, meta.labels, f"{path}.labels")
    validate_annotations(errs, meta.annotations, f"{path}.annotations")
    set_fields = {
        "name": meta.name,
        "generateName": meta.generate_name,
        "namespace": meta.namespace,
        "uid": meta.uid,
        "resourceVersion": meta.resource_version,
        "generation": meta.generation,
        "creationTimestamp": meta.creation_timestamp,
        "deletionTimestamp": meta.deletion_timestamp,
        "deletionGracePeriodSeconds": meta.deletion_grace_period_seconds,
        "ownerReferences": meta.owner_references,
        "finalizers": meta.finalizers,
        "managedFields": meta.managed_fields,
        "selfLink": meta.self_link,
    }
    for field, value in set_fields.items():
        if value:
            errs.forbidden(f"{path}.{field}", "cannot be set for a template")


def validate_meta_update(errs: Errs, new: ObjectMeta, old: ObjectMeta, path: str = "metadata") -> None:
    """Identity fields cannot change on update."""
    for field, a, b in (
        ("name", new.name, old.name),
        ("namespace", new.namespace, old.namespace),
    ):
        if a != b:
            errs.invalid(f"{path}.{field}", a, "field is immutable")
    if old.uid and new.uid and new.uid != old.uid:
        errs.invalid(f"{path}.uid", new.uid, "field is immutable")
