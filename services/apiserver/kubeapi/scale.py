"""The ``scale`` subresource of Deployments (``kubectl scale``): an ``autoscaling/v1`` Scale.

GET answers ``{spec: {replicas}, status: {replicas, selector}}`` from the Deployment. PUT and
PATCH (merge, JSON or strategic) change the Scale's ``spec.replicas`` and write it as an update of
the Deployment through the apiserver (a Scale naming a stale ``resourceVersion`` is a 409); every
other field of the Scale is ignored, as upstream.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SCALABLE", "scale_of", "selector_text"]

SCALABLE = frozenset({"Deployment"})


def selector_text(selector: Any) -> str:
    """A label selector as the text form ``status.selector`` carries (``app=demo,tier in (a,b)``)."""
    if not isinstance(selector, dict):
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key", ""), req.get("operator", ""), req.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def scale_of(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": spec.get("replicas", 1) if spec.get("replicas") is not None else 1},
        "status": {"replicas": status.get("replicas", 0), "selector": selector_text(spec.get("selector"))},
    }
