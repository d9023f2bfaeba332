"""Discovery documents: ``/api``, ``/apis``, ``/api/v1``, ``/apis/<group>/<version>``, ``/version``.

What kubectl's REST mapper and ``kubectl api-resources`` read: each resource's plural, singular,
kind, scope, verbs, short names and categories, and its ``status`` subresource. The legacy
(unaggregated) documents are served; kubectl falls back to them when the response is plain
``application/json``.
"""

from __future__ import annotations

from typing import Any

from services.apiserver.kubeapi.resources import Resource, groups, resources, verbs

__all__ = ["api_group_list", "api_resource_list", "api_versions", "version_info"]

KUBE_VERSION = (1, 37, 0)


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
