"""Validation of a CustomResourceDefinition itself, and the status the apiserver gives it.

Upstream's rules that matter for serving: the name is ``<plural>.<group>``, the group a domain
with a dot (``*.k8s.io`` / ``*.kubernetes.io`` only with the ``api-approved.kubernetes.io``
annotation), names are DNS labels, the scope is Namespaced or Cluster, versions are unique and
exactly one is the storage version, every version has a structural schema whose defaults are
valid and whose CEL rules compile, printer columns are well-formed, and scope and group never
change. Pure.
"""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace

from draflow.events.api import apiextensions_v1 as ax
from draflow.events.api.errors import NOT_SUPPORTED
from draflow.services.apiserver.crd.defaults import prune_and_default
from draflow.services.apiserver.crd.rules import check_rule
from draflow.services.apiserver.crd.schema import Schema, SchemaError, parse_schema, structural_problems
from draflow.services.apiserver.crd.values import validate_value
from draflow.services.dra.validation import names
from draflow.services.dra.validation.errs import Errs
from draflow.services.dra.validation.meta import validate_meta_update, validate_object_meta

__all__ = ["crd_status", "validate_crd"]

APPROVAL = "api-approved.kubernetes.io"
COLUMN_TYPES = ("integer", "number", "string", "boolean", "date")


def _protected(group: str) -> bool:
    return any(group == d or group.endswith("." + d) for d in ("k8s.io", "kubernetes.io"))


def validate_crd(
    errs: Errs, crd: ax.CustomResourceDefinition, old: ax.CustomResourceDefinition | None
) -> None:
    spec = crd.spec
    validate_object_meta(errs, crd.metadata, namespaced=False, name_check=names.dns1123_subdomain)
    if old is not None:
        validate_meta_update(errs, crd.metadata, old.metadata)
    want = f"{spec.names.plural}.{spec.group}"
    if crd.metadata.name and crd.metadata.name != want:
        errs.invalid("metadata.name", crd.metadata.name, 'must be spec.names.plural+"."+spec.group')
    if not spec.group:
        errs.required("spec.group")
    elif "." not in spec.group:
        errs.invalid("spec.group", spec.group, "should be a domain with at least one dot")
    else:
        errs.messages("spec.group", spec.group, names.dns1123_subdomain(spec.group))
        if _protected(spec.group) and not crd.metadata.annotations.get(APPROVAL):
            errs.required(
                f"metadata.annotations[{APPROVAL}]",
                f'protected groups must have approval annotation "{APPROVAL}", '
                "see https://github.com/kubernetes/enhancements/pull/1111",
            )
    _names(errs, spec.names)
    if not spec.scope:
        errs.required("spec.scope")
    elif spec.scope not in ("Cluster", "Namespaced"):
        errs.add(
            "spec.scope",
            NOT_SUPPORTED,
            f'{NOT_SUPPORTED}: "{spec.scope}": supported values: "Cluster", "Namespaced"',
        )
    if spec.conversion is not None and spec.conversion.strategy not in ("", "None"):
        errs.add(
            "spec.conversion.strategy",
            NOT_SUPPORTED,
            f'{NOT_SUPPORTED}: "{spec.conversion.strategy}": supported values: "None" '
            "(draflow runs no conversion webhooks)",
        )
    if spec.preserve_unknown_fields:
        errs.invalid(
            "spec.preserveUnknownFields", True, "must be false in order to use defaults in the schema"
        )
    _versions(errs, spec.versions)
    if old is not None:
        if spec.scope != old.spec.scope and old.spec.scope:
            errs.invalid("spec.scope", spec.scope, "field is immutable")
        if spec.group != old.spec.group:
            errs.invalid("spec.group", spec.group, "field is immutable")


def _names(errs: Errs, n: ax.CustomResourceDefinitionNames) -> None:
    at = "spec.names"
    if not n.plural:
        errs.required(f"{at}.plural")
    else:
        errs.messages(f"{at}.plural", n.plural, names.dns1123_label(n.plural))
    if n.singular:
        errs.messages(f"{at}.singular", n.singular, names.dns1123_label(n.singular))
    if not n.kind:
        errs.required(f"{at}.kind")
    for i, short in enumerate(n.short_names):
        errs.messages(f"{at}.shortNames[{i}]", short, names.dns1123_label(short))
    if n.list_kind and n.list_kind == n.kind:
        errs.invalid(f"{at}.listKind", n.list_kind, "kind and listKind may not be the same")


def _versions(errs: Errs, versions: tuple[ax.CustomResourceDefinitionVersion, ...]) -> None:
    if not versions:
        errs.invalid_detail("spec.versions", "must have exactly one version marked as storage version")
        return
    if sum(v.storage for v in versions) != 1:
        errs.invalid_detail("spec.versions", "must have exactly one version marked as storage version")
    seen: set[str] = set()
    for i, v in enumerate(versions):
        at = f"spec.versions[{i}]"
        if not v.name:
            errs.required(f"{at}.name")
        else:
            errs.messages(f"{at}.name", v.name, names.dns1123_label(v.name))
            if v.name in seen:
                errs.invalid(f"{at}.name", v.name, "must be unique")
            seen.add(v.name)
        _schema(errs, v, f"{at}.schema.openAPIV3Schema")
        for j, col in enumerate(v.additional_printer_columns):
            _column(errs, col, f"{at}.additionalPrinterColumns[{j}]")


def _schema(errs: Errs, v: ax.CustomResourceDefinitionVersion, at: str) -> None:
    raw = v.schema.open_apiv3_schema if v.schema is not None else None
    if raw is None:
        errs.required(at, "schemas are required")
        return
    try:
        schema = parse_schema(raw, at)
    except SchemaError as exc:
        errs.invalid_detail(exc.path, exc.message)
        return
    for path, rule in structural_problems(raw, at):
        kind, _, detail = rule.partition(": ")
        errs.add(path, kind, rule) if detail else errs.invalid_detail(path, rule)
    _defaults_and_rules(errs, schema, at)


def _defaults_and_rules(errs: Errs, s: Schema, at: str) -> None:
    if s.has_default:
        probe = Errs(errs.kind, errs.namespace, errs.name)
        unknown: list[str] = []
        value = prune_and_default(s.default, s, "default", unknown)
        validate_value(value, s, "default", probe)
        for e in probe.items:
            # "Invalid value: 5: default in body ..." -> the sentence; other types keep their text
            detail = e.rule.split(": ", 2)[-1] if e.rule.startswith("Invalid value: ") else e.rule
            errs.invalid(f"{at}.default{e.path[len('default') :]}", s.default, detail)
        if unknown:
            errs.invalid(f"{at}.default", s.default, f'unknown field "{unknown[0]}"')
    for i, rule in enumerate(s.rules):
        problem = check_rule(rule)
        if problem:
            errs.invalid(f"{at}.x-kubernetes-validations[{i}].rule", rule.rule, problem)
    children: list[tuple[str, Schema]] = [(f"{at}.properties[{k}]", sub) for k, sub in s.properties.items()]
    if s.items is not None:
        children.append((f"{at}.items", s.items))
    if isinstance(s.additional_properties, Schema):
        children.append((f"{at}.additionalProperties", s.additional_properties))
    for path, sub in children:
        _defaults_and_rules(errs, sub, path)


def _column(errs: Errs, col: ax.CustomResourceColumnDefinition, at: str) -> None:
    if not col.name:
        errs.required(f"{at}.name")
    if not col.type:
        errs.required(f"{at}.type")
    elif col.type not in COLUMN_TYPES:
        shown = ", ".join(f'"{t}"' for t in COLUMN_TYPES)
        errs.add(f"{at}.type", NOT_SUPPORTED, f'{NOT_SUPPORTED}: "{col.type}": supported values: {shown}')
    if not col.json_path:
        errs.required(f"{at}.jsonPath")
    if col.priority < 0:
        errs.invalid(f"{at}.priority", col.priority, "must be greater than or equal to 0")


def crd_status(
    crd: ax.CustomResourceDefinition, old: ax.CustomResourceDefinition | None, now: str
) -> ax.CustomResourceDefinitionStatus:
    """Established with its names accepted; storedVersions grows by the storage version."""
    n = crd.spec.names
    accepted = replace(n, singular=n.singular or n.kind.lower(), list_kind=n.list_kind or f"{n.kind}List")
    stored = list(old.status.stored_versions) if old is not None else []
    storage = ax.storage_version(crd)
    if storage and storage not in stored:
        stored.append(storage)
    previous = {c.type: c for c in (old.status.conditions if old is not None else ())}

    def condition(type_: str, reason: str, message: str) -> ax.CustomResourceDefinitionCondition:
        kept = previous.get(type_)
        since = kept.last_transition_time if kept is not None and kept.status == "True" else now
        return ax.CustomResourceDefinitionCondition(
            type=type_, status="True", last_transition_time=since, reason=reason, message=message
        )

    conditions: tuple[Any, ...] = (
        condition("NamesAccepted", "NoConflicts", "no conflicts found"),
        condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
    )
    return ax.CustomResourceDefinitionStatus(
        conditions=conditions, accepted_names=accepted, stored_versions=tuple(stored)
    )
