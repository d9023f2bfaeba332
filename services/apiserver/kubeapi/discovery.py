"""Discovery documents: ``/api``, ``/apis``, ``/api/v1``, ``/apis/<group>/<version>``, ``/version``.

What kubectl's REST mapper and ``kubectl api-resources`` read: each resource's plural, singular,
kind, scope, verbs, short names and categories, and its ``status`` subresource. Two shapes, as
upstream: aggregated discovery (``apidiscovery.k8s.io/v2`` ``APIGroupDiscoveryList``: every group,
version and resource in the one answer of ``/api`` or ``/apis``) when the client's Accept asks
for it, as kubectl and client-go do; otherwise the legacy documents, one request per group version.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import msgspec

from draflow.events.api.registry import generation
from draflow.services.apiserver.kubeapi.resources import Resource, groups, resources, verbs

__all__ = [
    "AGGREGATED_VERSIONS",
    "aggregated",
    "aggregated_json",
    "aggregated_type",
    "api_group_list",
    "api_resource_list",
    "api_versions",
    "version_info",
    "wants_aggregated",
]

KUBE_VERSION = (1, 37, 0)
# the aggregated discovery versions served (the same document, v2beta1 for client-go < 1.30)
AGGREGATED_VERSIONS = ("v2", "v2beta1")


def version_info() -> dict[str, str]:
    major, minor, patch = KUBE_VERSION
    return {
        "major": str(major),
        "minor": str(minor),
        "gitVersion": f"v{major}.{minor}.{patch}-draflow",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "draflow",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list() -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(g, vs) for g, vs in groups().items() if g],
    }


def api_group(name: str) -> dict[str, Any] | None:
    versions = groups().get(name)
    if not name or versions is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _entries(r: Resource) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.wire_kind,
        "verbs": verbs(r),
    }
    if r.short_names:
        main["shortNames"] = list(r.short_names)
    if r.categories:
        main["categories"] = list(r.categories)
    out = [main]
    if r.has_status:
        out.append(
            {
                "name": f"{r.plural}/status",
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.wire_kind,
                "verbs": ["get", "patch", "update"],
            }
        )
    if r.kind == "Deployment":
        out.append(
            {
                "name": f"{r.plural}/scale",
                "singularName": "",
                "namespaced": True,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }
        )
    return out


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    served = [r for r in resources() if r.group == group and version in r.versions]
    if not served:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [e for r in served for e in _entries(r)],
    }


def wants_aggregated(accept: str) -> str | None:
    """The aggregated discovery version (``v2``, or ``v2beta1`` of client-go before 1.30) the
    first acceptable type of ``accept`` asks for as JSON, None for the legacy documents (kubectl
    lists the protobuf variants first: those are skipped, the answer is JSON either way)."""
    for part in accept.split(","):
        media, *raw = (p.strip() for p in part.split(";"))
        params = dict(p.split("=", 1) for p in raw if "=" in p)
        if media not in ("application/json", "*/*", "application/*"):
            continue
        if "as" not in params:
            return None  # plain JSON: the legacy documents
        if (
            params.get("g") == "apidiscovery.k8s.io"
            and params.get("v") in AGGREGATED_VERSIONS
            and params["as"] == "APIGroupDiscoveryList"
        ):
            return params["v"]
    return None


def aggregated_type(version: str) -> str:
    """The Content-Type of an aggregated discovery answer in ``version``."""
    return f"application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"


def _gvk(group: str, version: str, kind: str) -> dict[str, str]:
    return {"group": group, "version": version, "kind": kind}


def _aggregated_resource(r: Resource, version: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "resource": r.plural,
        "responseKind": _gvk(r.group, version, r.wire_kind),
        "scope": "Namespaced" if r.namespaced else "Cluster",
        "singularResource": r.singular,
        "verbs": verbs(r),
    }
    if r.short_names:
        out["shortNames"] = list(r.short_names)
    if r.categories:
        out["categories"] = list(r.categories)
    subs = []
    if r.has_status:
        subs.append(
            {
                "subresource": "status",
                "responseKind": _gvk(r.group, version, r.wire_kind),
                "verbs": ["get", "patch", "update"],
            }
        )
    if r.kind == "Deployment":
        subs.append(
            {
                "subresource": "scale",
                "responseKind": _gvk("autoscaling", "v1", "Scale"),
                "verbs": ["get", "patch", "update"],
            }
        )
    if subs:
        out["subresources"] = subs
    return out


def aggregated(core: bool, version: str = "v2") -> dict[str, Any]:
    """The ``APIGroupDiscoveryList`` of ``/api`` (``core``: the legacy group "") or ``/apis``
    (every named group), versions in order of preference."""
    items = []
    for group, versions in groups().items():
        if (group == "") != core:
            continue
        items.append(
            {
                "metadata": {"name": group, "creationTimestamp": None},
                "versions": [
                    {
                        "version": v,
                        "resources": [
                            _aggregated_resource(r, v)
                            for r in resources()
                            if r.group == group and v in r.versions
                        ],
                        "freshness": "Current",
                    }
                    for v in versions
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"apidiscovery.k8s.io/{version}",
        "metadata": {},
        "items": items,
    }


def aggregated_json(core: bool, version: str = "v2") -> bytes:
    """``aggregated`` encoded once per set of served resources (CRDs change it)."""
    return _aggregated_json(generation(), core, version)


@lru_cache(maxsize=8)
def _aggregated_json(gen: int, core: bool, version: str) -> bytes:
    return msgspec.json.encode(aggregated(core, version))
