"""Server-side apply: ``PATCH`` with ``application/apply-patch+yaml`` and a ``fieldManager``.

The manager comes to own exactly the fields of its configuration (operation ``Apply``, in
``metadata.managedFields``, see ``services.apiserver.managed_fields``):

* a field another manager owns whose value the configuration changes is a conflict: 409 with
  upstream's message (``Apply failed with 1 conflict: conflict with "kubectl-client-side-apply"
  using apps/v1: .spec.replicas``) and one cause per field, unless ``force=true`` takes it over;
  equal values are shared (both managers own them);
* a field it applied before and no longer applies is removed, unless another manager owns it;
* keyed lists (containers by name, conditions by type...) merge item by item, other lists are
  replaced whole; ``status`` is not applied through the main resource.

Values are compared with the configuration as defaulting would store it (the caller passes that
form as ``defaulted``), so an atomic list whose items the server defaulted does not conflict
with itself.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from services.apiserver.kubeapi.patch import PatchError
from services.apiserver.managed_fields import (
    Path,
    differs,
    field_types,
    fieldset,
    from_fields_v1,
    merge_key_of,
    now_rfc3339,
    remove_path,
    to_fields_v1,
)

__all__ = ["ApplyConflict", "check_config", "server_side_apply"]

Owned = list[tuple[dict[str, Any], set[Path]]]


class ApplyConflict(Exception):
    def __init__(self, message: str, causes: list[dict[str, str]]) -> None:
        super().__init__(message)
        self.causes = causes


def check_config(config: Any, wire_kind: str) -> dict[str, Any]:
    """The apply configuration, refused as upstream when it is not an object of the right kind."""
    if not isinstance(config, dict):
        raise PatchError(400, "BadRequest", "an apply patch must be an object")
    if not config.get("apiVersion") or not config.get("kind"):
        raise PatchError(400, "BadRequest", "apiVersion and kind must be set in an apply configuration")
    if config["kind"] != wire_kind:
        raise PatchError(
            400, "BadRequest", f"the apply configuration's kind {config['kind']!r} is not {wire_kind!r}"
        )
    out = {k: v for k, v in config.items() if k != "status"}
    meta = out.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise PatchError(400, "BadRequest", "metadata must be an object")
    meta.pop("managedFields", None)
    return out


def _owned(obj: dict[str, Any] | None) -> Owned:
    entries = ((obj or {}).get("metadata") or {}).get("managedFields") or []
    return [
        (dict(e), from_fields_v1(e.get("fieldsV1") or {}))
        for e in entries
        if isinstance(e, dict) and not e.get("subresource")
    ]


def _kept_subresources(obj: dict[str, Any] | None) -> list[dict[str, Any]]:
    entries = ((obj or {}).get("metadata") or {}).get("managedFields") or []
    return [e for e in entries if isinstance(e, dict) and e.get("subresource")]


def _store(obj: dict[str, Any], owned: Owned, kept: list[dict[str, Any]]) -> dict[str, Any]:
    entries = list(kept)
    for entry, paths in owned:
        if paths:
            entries.append({**entry, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(paths)})
    obj.setdefault("metadata", {})["managedFields"] = entries
    return obj


def path_text(path: Path) -> str:
    """``.spec.containers[name="c"].image``, as upstream names a field in a conflict."""
    out = ""
    for part in path:
        kind, _, rest = part.partition(":")
        if kind == "f":
            out += "." + rest
        elif kind == "k":
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(rest).items()) + "]"
        elif kind == "v":
            out += f"[{rest}]"
    return out


def _merge(current: Any, config: Any, cls: Any) -> Any:
    if not isinstance(config, dict) or not isinstance(current, dict):
        return copy.deepcopy(config)
    out = dict(current)
    fields = field_types(cls) if cls is not None else {}
    for key, value in config.items():
        merge_key = merge_key_of(cls, key)
        if isinstance(value, list) and merge_key is not None and isinstance(out.get(key), list):
            if merge_key == "":
                out[key] = list(out[key]) + [v for v in value if v not in out[key]]
                continue
            merged = [copy.deepcopy(i) for i in out[key]]
            for item in value:
                idx = next(
                    (
                        i
                        for i, o in enumerate(merged)
                        if isinstance(o, dict)
                        and isinstance(item, dict)
                        and o.get(merge_key) == item.get(merge_key)
                    ),
                    None,
                )
                if idx is None:
                    merged.append(copy.deepcopy(item))
                else:
                    merged[idx] = _merge(merged[idx], item, fields.get(key))
            out[key] = merged
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value, fields.get(key))
        else:
            out[key] = copy.deepcopy(value)
    return out


def _is_mine(entry: dict[str, Any], manager: str) -> bool:
    return entry.get("manager") == manager and entry.get("operation") == "Apply"


def server_side_apply(
    current: dict[str, Any] | None,
    config: dict[str, Any],
    manager: str,
    *,
    force: bool,
    struct: Any,
    api_version: str,
    defaulted: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The object after ``manager`` applies ``config`` (checked by ``check_config``) to ``current``
    (None: it is created); raises ApplyConflict."""
    applied = fieldset(config, struct)
    entry = {"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": now_rfc3339()}
    if current is None:
        return _store(copy.deepcopy(config), [(entry, applied)], [])
    compare = defaulted if defaulted is not None else config
    owned = _owned(current)
    mine = next((p for e, p in owned if _is_mine(e, manager)), set())
    conflicts: list[tuple[Path, str, str]] = []
    for e, paths in owned:
        if _is_mine(e, manager):
            continue
        for p in sorted(paths & applied):
            if p[-1] != "." and differs(current, compare, p):
                conflicts.append((p, str(e.get("manager")), str(e.get("apiVersion") or api_version)))
    if conflicts and not force:
        causes = [
            {
                "reason": "FieldManagerConflict",
                "message": f'conflict with "{m}" using {v}',
                "field": path_text(p),
            }
            for p, m, v in conflicts
        ]
        if len(conflicts) == 1:
            p, m, v = conflicts[0]
            message = f'Apply failed with 1 conflict: conflict with "{m}" using {v}: {path_text(p)}'
        else:
            lines = "\n".join(f'- conflict with "{m}" using {v}: {path_text(p)}' for p, m, v in conflicts)
            message = f"Apply failed with {len(conflicts)} conflicts: {lines}"
        raise ApplyConflict(message, causes)
    taken = {p for p, _, _ in conflicts}
    others: set[Path] = set()
    kept: Owned = []
    for e, paths in owned:
        if _is_mine(e, manager):
            continue
        paths -= taken  # forced: the value is this manager's now
        others |= paths
        kept.append((e, paths))
    new = _merge(copy.deepcopy(current), config, struct)
    for p in sorted(mine - applied - others, key=len, reverse=True):
        remove_path(new, p)
    meta = new.setdefault("metadata", {})
    meta["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
    kept.append((entry, applied))
    return _store(new, kept, _kept_subresources(current))
