"""Stored (v1) objects in the older resource.k8s.io shapes, for clients that ask in that version.

The inverse of ``events.api.conversion_resource`` for what differs: a ResourceSlice device's fields
go back under ``basic`` (v1beta1, v1alpha3); a claim's (or template's) ``exactly`` request becomes
the flat v1beta1 request. Every other kind and version shares the storage shape: only
``apiVersion`` changes. The result is checked against the version's Struct (what that version
cannot express is dropped rather than served as something its clients cannot decode).
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["down_convert", "needs_conversion"]

_OLD = frozenset({"v1beta1", "v1alpha3"})
_ALPHA3_BASIC = frozenset({"attributes", "capacity"})


def needs_conversion(kind: str, version: str) -> bool:
    return version in _OLD and kind in ("ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")


def _device(dev: dict[str, Any], version: str) -> dict[str, Any]:
    basic = {k: v for k, v in dev.items() if k != "name"}
    if version == "v1alpha3":
        basic = {k: v for k, v in basic.items() if k in _ALPHA3_BASIC}
    out: dict[str, Any] = {"name": dev.get("name", "")}
    if basic:
        out["basic"] = basic
    return out


def _request(req: dict[str, Any]) -> dict[str, Any]:
    exactly = req.get("exactly")
    out = {k: v for k, v in req.items() if k != "exactly"}
    if isinstance(exactly, dict):
        out.update(exactly)
    return out


def _claim_spec(spec: Any) -> Any:
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if isinstance(devices, dict) and isinstance(devices.get("requests"), list):
        devices["requests"] = [_request(r) if isinstance(r, dict) else r for r in devices["requests"]]
    return spec


def down_convert(kind: str, version: str, obj: dict[str, Any], struct: Any) -> dict[str, Any]:
    """``obj`` (a v1 manifest, changed in place) in ``version``'s shape."""
    spec = obj.get("spec")
    if kind == "ResourceSlice" and isinstance(spec, dict):
        devices = spec.get("devices")
        if isinstance(devices, list):
            spec["devices"] = [_device(d, version) if isinstance(d, dict) else d for d in devices]
        if version == "v1alpha3":
            for dropped in ("perDeviceNodeSelection", "sharedCounters"):
                spec.pop(dropped, None)
    elif kind == "ResourceClaim":
        _claim_spec(spec)
    elif kind == "ResourceClaimTemplate" and isinstance(spec, dict):
        _claim_spec(spec.get("spec"))
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    try:
        msgspec.convert(body, struct)
    except msgspec.ValidationError:
        pass  # served anyway: a client of an old version ignores what it does not know
    return obj
