"""PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

A patch is applied to the object's current JSON; the result then goes through the apiserver's
update (the same validation and append as a PUT). Strategic merge patch follows apimachinery's
rules for the built-in kinds: lists with a patch merge key (containers by ``name``, ownerReferences
by ``uid``, conditions by ``type``...) merge item by item, ``finalizers`` merges as a set, every
other list is replaced; the directives kubectl's apply sends are understood (``$patch:
replace|delete|merge``, ``$retainKeys``, ``$setElementOrder/<list>``,
``$deleteFromPrimitiveList/<list>``). The merge keys come from the Go types' ``patchMergeKey`` /
``patchStrategy=merge`` tags and are looked up by walking the kind's Struct with the patch.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from services.apiserver.managed_fields import MERGE_KEYS, field_types, merge_key_of

__all__ = ["MERGE_KEYS", "PatchError", "apply_patch", "json_patch", "merge_patch", "strategic_merge"]

_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


class PatchError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


# -- JSON merge patch ------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# -- JSON patch ------------------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(422, "Invalid", f"the JSON patch path {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    for part in parts:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise PatchError(
                422,
                "Invalid",
                f"the server rejected our request due to an error in our request: "
                f"doc is missing path: {path!r}",
            )
    return doc


def _index(container: list[Any], key: str, path: str, adding: bool) -> int:
    if key == "-" and adding:
        return len(container)
    if not key.isdigit() or int(key) > len(container) - (0 if adding else 1):
        raise PatchError(422, "Invalid", f"the server rejected our request: index out of range in {path!r}")
    return int(key)


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    if isinstance(parent, dict):
        parent[parts[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, parts[-1], path, True), value)
    else:
        raise PatchError(422, "Invalid", f"cannot add at {path!r}")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    parts = _pointer(path)
    if not parts:
        raise PatchError(422, "Invalid", "cannot remove the whole document")
    parent = _walk(doc, parts[:-1], path)
    if isinstance(parent, dict):
        if parts[-1] not in parent:
            raise PatchError(
                422, "Invalid", f"the server rejected our request: doc is missing path: {path!r}"
            )
        return doc, parent.pop(parts[-1])
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, parts[-1], path, False))
    raise PatchError(422, "Invalid", f"cannot remove {path!r}")


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError(400, "BadRequest", "a JSON patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise PatchError(400, "BadRequest", f"invalid JSON patch operation: {op!r}")
        kind, path = op.get("op"), op["path"]
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            doc, _ = _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise PatchError(400, "BadRequest", f"JSON patch {kind} needs a 'from': {op!r}")
            if kind == "move":
                doc, value = _remove(doc, source)
            else:
                value = copy.deepcopy(_walk(doc, _pointer(source), source))
            doc = _add(doc, path, value)
        elif kind == "test":
            if _walk(doc, _pointer(path), path) != op.get("value"):
                raise PatchError(422, "Invalid", f"the JSON patch test at {path!r} failed")
        else:
            raise PatchError(400, "BadRequest", f"unknown JSON patch operation {kind!r}")
    return doc


# -- strategic merge patch -----------------------------------------------------------------------


def _item_key(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else None


def _merge_list(original: list[Any], patch: list[Any], key: str, item_cls: Any) -> list[Any]:
    if key == "":  # a set of scalars
        out = list(original)
        for v in patch:
            if v not in out:
                out.append(v)
        return out
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [p for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    out = [copy.deepcopy(o) for o in original]
    for p in patch:
        if not isinstance(p, dict):
            continue
        k = p.get(key)
        idx = next((i for i, o in enumerate(out) if _item_key(o, key) == k), None)
        if p.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        if idx is None:
            out.append(_strip_directives(p))
        else:
            out[idx] = strategic_merge(out[idx], p, item_cls)
    return out


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _reorder(items: list[Any], order: list[Any], key: str) -> list[Any]:
    def ident(item: Any) -> Any:
        return item if key == "" else _item_key(item, key)

    rank = {
        msgspec.json.encode(o): i for i, o in enumerate(o if key == "" else _item_key(o, key) for o in order)
    }
    known = [i for i in items if msgspec.json.encode(ident(i)) in rank]
    known.sort(key=lambda i: rank[msgspec.json.encode(ident(i))])
    return known + [i for i in items if msgspec.json.encode(ident(i)) not in rank]


def strategic_merge(original: Any, patch: Any, cls: Any) -> Any:
    """``patch`` applied to ``original`` (JSON values), ``cls`` the Struct ``original`` decodes into."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(original, dict):
        original = {}
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives(patch)
    if directive == "delete":
        return None
    out = dict(original)
    fields = field_types(cls) if cls is not None else {}
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys"):
            continue
        if key.startswith(_ORDER):
            if isinstance(value, list):
                orders[key[len(_ORDER) :]] = value
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            field = key[len(_DELETE_PRIMITIVE) :]
            if isinstance(out.get(field), list) and isinstance(value, list):
                out[field] = [v for v in out[field] if v not in value]
            continue
        if value is None:
            out.pop(key, None)
            continue
        child = fields.get(key)
        merge_key = merge_key_of(cls, key)
        if isinstance(value, list) and merge_key is not None and isinstance(out.get(key), list):
            out[key] = _merge_list(out[key], value, merge_key, child)
        elif isinstance(value, list):
            out[key] = _strip_directives(value)
        elif isinstance(value, dict):
            merged = strategic_merge(out.get(key), value, child)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        else:
            out[key] = value
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    for field, order in orders.items():
        merge_key = merge_key_of(cls, field)
        if isinstance(out.get(field), list):
            out[field] = _reorder(out[field], order, merge_key or "")
    return out


def apply_patch(current: dict[str, Any] | None, raw: bytes, content_type: str, struct: Any) -> dict[str, Any]:
    """The object after the patch (a new dict; ``current`` is not changed)."""
    if current is None:
        raise PatchError(404, "NotFound", "the object to patch does not exist")
    try:
        patch = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise PatchError(400, "BadRequest", f"the body of the patch is not JSON: {exc}") from None
    if content_type == "application/json-patch+json":
        out = json_patch(current, patch)
    elif content_type == "application/merge-patch+json":
        if not isinstance(patch, dict):
            raise PatchError(400, "BadRequest", "a merge patch must be a JSON object")
        out = merge_patch(current, patch)
    elif content_type == "application/strategic-merge-patch+json":
        if not isinstance(patch, dict):
            raise PatchError(400, "BadRequest", "a strategic merge patch must be a JSON object")
        out = strategic_merge(current, patch, struct)
    else:
        raise PatchError(
            415, "UnsupportedMediaType", f"the patch content type {content_type!r} is not supported"
        )
    if not isinstance(out, dict):
        raise PatchError(422, "Invalid", "the patched object is not a JSON object")
    return out
