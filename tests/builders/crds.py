"""CustomResourceDefinitions and custom objects as manifests (dicts, as a user applies them).

``make_crd`` builds a CRD around one schema; ``frobnicator_crd`` is KEP-4381's example vendor
parameter type (``ClaimParameters`` of ``gpu.resource.example.com``: ``numberOfFrobnicators``
1-16, default 1, plus ``env``); ``make_custom`` builds an object of any custom kind.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FROB_GROUP", "frobnicator_crd", "make_crd", "make_custom", "make_frob"]

FROB_GROUP = "gpu.resource.example.com"


def make_crd(
    kind: str,
    group: str,
    schema: dict[str, Any],
    *,
    plural: str = "",
    scope: str = "Namespaced",
    versions: tuple[str, ...] = ("v1",),
    storage: str = "",
    short_names: tuple[str, ...] = (),
    columns: tuple[dict[str, Any], ...] = (),
    status_subresource: bool = False,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    plural = plural or kind.lower() + "s"
    names: dict[str, Any] = {"kind": kind, "plural": plural, "singular": kind.lower()}
    if short_names:
        names["shortNames"] = list(short_names)
    vs = []
    for v in versions:
        entry: dict[str, Any] = {
            "name": v,
            "served": True,
            "storage": v == (storage or versions[0]),
            "schema": {"openAPIV3Schema": schema},
        }
        if columns:
            entry["additionalPrinterColumns"] = list(columns)
        if status_subresource:
            entry["subresources"] = {"status": {}}
        vs.append(entry)
    meta: dict[str, Any] = {"name": f"{plural}.{group}"}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": meta,
        "spec": {"group": group, "names": names, "scope": scope, "versions": vs},
    }


def frobnicator_crd(**kw: Any) -> dict[str, Any]:
    """The KEP's ClaimParameters CRD (with a CEL rule on ``env`` keys, for the rule tests)."""
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "numberOfFrobnicators": {"type": "integer", "minimum": 1, "maximum": 16, "default": 1},
                    "env": {
                        "type": "object",
                        "additionalProperties": {"type": "string", "maxLength": 32},
                        "x-kubernetes-validations": [
                            {
                                "rule": "self.all(k, k.matches('^[A-Z_]+$'))",
                                "message": "env names are upper case",
                            }
                        ],
                    },
                },
            }
        },
    }
    columns = ({"name": "Frobnicators", "type": "integer", "jsonPath": ".spec.numberOfFrobnicators"},)
    return make_crd("ClaimParameters", FROB_GROUP, schema, plural="claimparameters", columns=columns, **kw)


def make_custom(kind: str, api_version: str, name: str, namespace: str = "", **fields: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **fields}


def make_frob(name: str, count: int | None = None, **spec: Any) -> dict[str, Any]:
    if count is not None:
        spec["numberOfFrobnicators"] = count
    return make_custom("ClaimParameters", f"{FROB_GROUP}/v1", name, spec=spec)
