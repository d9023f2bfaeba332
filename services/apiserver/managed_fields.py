"""managedFields: which field manager owns which fields of an object (server-side apply's books).

Fields are paths in upstream's ``FieldsV1`` form (``f:spec``, ``k:{"name":"c"}`` for an item of a
keyed list, ``v:"x"`` for a member of a set, ``.`` for a keyed item itself). Lists are keyed as
structured-merge-diff keys the built-in kinds (the ``patchMergeKey`` / ``patchStrategy=merge`` tags
of the Go types, ``MERGE_KEYS``); other lists are atomic. :func:`record_update` is what every write
that names a field manager does (``ApplyRequest.field_manager``): the manager gets the fields it
changed, operation ``Update``, and everyone else loses them; fields that went stop being owned.
Pure: JSON values and Structs in, Structs out.
"""

from __future__ import annotations

import datetime
import json
import types
import typing
from typing import Any

import msgspec
from msgspec.structs import replace

from events.api.base import ApiStruct
from events.api.codec import encode_object, object_meta
from events.api.meta import ManagedFieldsEntry, ObjectMeta

__all__ = [
    "MERGE_KEYS",
    "field_types",
    "fieldset",
    "from_fields_v1",
    "merge_key_of",
    "record_update",
    "to_fields_v1",
]

Path = tuple[str, ...]
_SKIP_META = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generateName",
    }
)

# (Struct name, JSON field) -> the merge key of its items ("" = a list of scalars merged as a set)
MERGE_KEYS: dict[tuple[str, str], str] = {
    ("ObjectMeta", "finalizers"): "",
    ("ObjectMeta", "ownerReferences"): "uid",
    ("PodSpec", "containers"): "name",
    ("PodSpec", "initContainers"): "name",
    ("PodSpec", "ephemeralContainers"): "name",
    ("PodSpec", "volumes"): "name",
    ("PodSpec", "imagePullSecrets"): "name",
    ("PodSpec", "hostAliases"): "ip",
    ("PodSpec", "resourceClaims"): "name",
    ("PodSpec", "schedulingGates"): "name",
    ("Container", "ports"): "containerPort",
    ("Container", "env"): "name",
    ("Container", "volumeMounts"): "mountPath",
    ("Container", "volumeDevices"): "devicePath",
    ("PodStatus", "conditions"): "type",
    ("PodStatus", "podIPs"): "ip",
    ("PodStatus", "hostIPs"): "ip",
    ("PodStatus", "resourceClaimStatuses"): "name",
    ("NodeSpec", "podCIDRs"): "",
    ("NodeStatus", "conditions"): "type",
    ("NodeStatus", "addresses"): "type",
    ("NamespaceStatus", "conditions"): "type",
    ("DeploymentStatus", "conditions"): "type",
    ("JobStatus", "conditions"): "type",
    ("ResourceClaimStatus", "reservedFor"): "uid",
}


def _unwrap(tp: Any) -> Any:
    """The Struct (or None) a field holds, through Optional, tuples and string-keyed maps."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            found = _unwrap(arg)
            if found is not None:
                return found
        return None
    if origin in (tuple, list):
        args = typing.get_args(tp)
        return _unwrap(args[0]) if args else None
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return tp
    return None


def field_types(cls: Any) -> dict[str, Any]:
    cached = _FIELDS.get(cls)
    if cached is None:
        cached = {f.encode_name: _unwrap(f.type) for f in msgspec.structs.fields(cls)}
        _FIELDS[cls] = cached
    return cached


_FIELDS: dict[Any, dict[str, Any]] = {}


def merge_key_of(cls: Any, field: str) -> str | None:
    """The merge key of ``cls``'s list field ``field`` ("" = a set of scalars; None = atomic)."""
    if cls is None:
        return None
    return MERGE_KEYS.get((cls.__name__, field))


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key_token(item: dict[str, Any], key: str) -> str:
    return "k:" + json.dumps({key: item.get(key)}, separators=(",", ":"))


def _walk(value: Any, cls: Any, prefix: Path, out: set[Path]) -> None:
    if not isinstance(value, dict) or not value:
        out.add(prefix)
        return
    fields = field_types(cls) if cls is not None else {}
    for key, child in value.items():
        path = (*prefix, f"f:{key}")
        merge_key = merge_key_of(cls, key)
        if isinstance(child, list) and merge_key is not None:
            if not child:
                out.add(path)
            for item in child:
                if merge_key == "":
                    out.add((*path, "v:" + json.dumps(item, separators=(",", ":"))))
                elif isinstance(item, dict):
                    ipath = (*path, _key_token(item, merge_key))
                    out.add((*ipath, "."))
                    _walk(item, fields.get(key), ipath, out)
        elif isinstance(child, dict) and child:
            _walk(child, fields.get(key), path, out)
        else:
            out.add(path)


def fieldset(obj: dict[str, Any], struct: Any) -> set[Path]:
    """The leaf fields an object sets (metadata's server-owned fields and status left out)."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "status"):
            continue
        if key == "metadata" and isinstance(value, dict):
            meta = {k: v for k, v in value.items() if k not in _SKIP_META}
            for k, v in meta.items():
                sub: set[Path] = set()
                _walk({k: v}, ObjectMeta, ("f:metadata",), sub)
                out |= sub
            continue
        _walk({key: value}, struct, (), out)
    return out


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(part, {})
    return root


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(tree, dict) or not tree:
        if prefix:
            out.add(prefix)
        return out
    for k, v in tree.items():
        if k == ".":
            out.add((*prefix, "."))
            continue
        if isinstance(v, dict) and v:
            out |= from_fields_v1(v, (*prefix, k))
        else:
            out.add((*prefix, k))
    return out


def value_at(obj: Any, path: Path) -> Any:
    """The value at ``path`` (a KeyError when absent)."""
    for part in path:
        if part == ".":
            return obj
        kind, _, rest = part.partition(":")
        if kind == "f":
            if not isinstance(obj, dict) or rest not in obj:
                raise KeyError(part)
            obj = obj[rest]
        elif kind == "k":
            want = json.loads(rest)
            if not isinstance(obj, list):
                raise KeyError(part)
            obj = next(
                (i for i in obj if isinstance(i, dict) and all(i.get(k) == v for k, v in want.items())), None
            )
            if obj is None:
                raise KeyError(part)
        elif kind == "v":
            want = json.loads(rest)
            if not isinstance(obj, list) or want not in obj:
                raise KeyError(part)
            obj = want
    return obj


def differs(a: Any, b: Any, path: Path) -> bool:
    try:
        va = value_at(a, path)
    except KeyError:
        va = KeyError
    try:
        vb = value_at(b, path)
    except KeyError:
        vb = KeyError
    if path and path[-1] == ".":
        return (va is KeyError) != (vb is KeyError)
    return bool(va != vb)


def remove_path(obj: Any, path: Path) -> None:
    """Delete the field at ``path`` from ``obj`` (in place; absent is fine)."""
    if path and path[-1] == ".":
        path = path[:-1]
    try:
        parent = value_at(obj, path[:-1])
    except KeyError:
        return
    kind, _, rest = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(rest, None)
    elif kind == "k" and isinstance(parent, list):
        want = json.loads(rest)
        parent[:] = [
            i for i in parent if not (isinstance(i, dict) and all(i.get(k) == v for k, v in want.items()))
        ]
    elif kind == "v" and isinstance(parent, list):
        want = json.loads(rest)
        parent[:] = [i for i in parent if i != want]


def _entry_paths(entry: ManagedFieldsEntry) -> set[Path]:
    return from_fields_v1(entry.fields_v1 or {})


def record_update(
    old: ApiStruct | None, new: ApiStruct, manager: str, operation: str = "Update"
) -> ApiStruct:
    """``new`` with managedFields saying ``manager`` changed what differs from ``old``."""
    struct = type(new)
    new_json = encode_object(new)
    old_json = encode_object(old) if old is not None else None
    new_set = fieldset(new_json, struct)
    changed = {p for p in new_set if old_json is None or differs(old_json, new_json, p)}
    gone = fieldset(old_json, struct) - new_set if old_json is not None else set()
    entries = list(object_meta(old).managed_fields) if old is not None else []
    out: list[ManagedFieldsEntry] = []
    mine: ManagedFieldsEntry | None = None
    for entry in entries:
        if entry.subresource:
            out.append(entry)
            continue
        if entry.manager == manager and entry.operation == operation:
            mine = entry
            continue
        paths = _entry_paths(entry) - gone - changed
        if paths:
            out.append(replace(entry, fields_v1=to_fields_v1(paths)))
    if mine is not None or changed:
        paths = (_entry_paths(mine) - gone if mine is not None else set()) | changed
        if paths:
            out.append(
                ManagedFieldsEntry(
                    manager=manager,
                    operation=operation,
                    api_version=new.API_VERSION,
                    time=now_rfc3339() if changed or mine is None else mine.time,
                    fields_type="FieldsV1",
                    fields_v1=to_fields_v1(paths),
                )
            )
    return replace(new, metadata=replace(object_meta(new), managed_fields=tuple(out)))
