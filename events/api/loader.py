"""Load manifests the way kubectl reads files: multi-document YAML or JSON, ``List`` wrappers,
one result per object, so one bad document never stops the others.

Documents are split on lines that are exactly ``---`` (kubectl's YAML reader does the same), so a
YAML syntax error only costs its own document. YAML timestamps stay strings (the API types hold
RFC 3339 text) and duplicate mapping keys are refused (Kubernetes' strict decoding does). Go
template placeholders (``{{.Index}}`` in scheduler_perf templates) are refused with a clear
message; ``substitute_index`` renders the ``{{.Index}}`` ones first, as scheduler_perf does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import yaml

from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import decode_object, identity
from draflow.events.api.errors import DECODE, ApiError, FieldError

__all__ = ["LoadResult", "load_manifests", "parse_documents", "substitute_index"]

# Bounds against hostile input (the API server limits a request to 3 MiB; etcd an object to 1.5).
MAX_NODES = 1_000_000
MAX_DEPTH = 200

_SEPARATOR = re.compile(r"^---[ \t\r]*(?:\n|\Z)", re.M)
_GO_TEMPLATE = re.compile(r"\{\{-?\s*(?:[.$]|(?:range|if|else|end|with|template|define|block)\b)")
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):
    """SafeLoader without timestamp resolution and with duplicate-key detection."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f'mapping key "{key_node.value}" already defined at line {seen[key].line + 1}',
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _TIMESTAMP]
    for first, resolvers in _Base.yaml_implicit_resolvers.items()
}


class LoadResult(msgspec.Struct, frozen=True, kw_only=True):
    """One object of a manifest file: decoded (``obj``) or refused (``error``).

    ``document`` is the 0-based document index in the file, ``item`` the index inside a
    ``List`` (None otherwise), ``line`` the 1-based line where the document starts.
    """

    source: str
    document: int
    line: int
    item: int | None = None
    raw: Any = None
    obj: ApiStruct | None = None
    error: ApiError | None = None

    @property
    def where(self) -> str:
        at = f"{self.source}: document {self.document + 1} (line {self.line})"
        return at if self.item is None else f"{at}, items[{self.item}]"

    @property
    def ok(self) -> bool:
        return self.obj is not None


def substitute_index(text: str, index: int) -> str:
    """Render scheduler_perf's ``{{.Index}}`` placeholders (the only template action they use)."""
    return re.sub(r"\{\{-?\s*\.Index\s*-?\}\}", str(index), text)


def _doc_error(rule: str, raw: Any = None) -> ApiError:
    kind, namespace, name = identity(raw)
    return ApiError([FieldError(kind=kind, namespace=namespace, name=name, type=DECODE, rule=rule)])


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):  # YAML 1.1 `on:` / `yes:` keys, spelled as JSON would
        return "true" if key else "false"
    if isinstance(key, int | float):
        return str(key)
    raise ValueError(f"a mapping key must be a string, got {type(key).__name__} {key!r:.40}")


def _to_json(value: Any, budget: list[int], depth: int = 0) -> Any:
    """The document as JSON data (what the API server sees after kubectl's YAML-to-JSON step).

    Bounds size and nesting (aliases can make a small YAML text expand exponentially) and refuses
    YAML-only values (binary, sets, explicit timestamps) that have no JSON form.
    """
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError("document too large or contains excessive aliasing")
    if depth > MAX_DEPTH:
        raise ValueError(f"document nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        return {_json_key(k): _to_json(v, budget, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_json(v, budget, depth + 1) for v in value]
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value} is not a valid JSON number")
        return value
    raise ValueError(
        f"a {type(value).__name__} value has no JSON form (YAML tags like !!binary are not supported)"
    )


def parse_documents(text: str) -> list[tuple[int, Any]]:
    """Split and parse; returns (start line, data or ApiError) per non-empty document."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            data = msgspec.json.decode(stripped)
        except msgspec.DecodeError:
            pass  # flow-style YAML (trailing commas, comments): parse as YAML below
        else:
            return [(text.count("\n", 0, len(text) - len(stripped)) + 1, data)]
    out: list[tuple[int, Any]] = []
    starts = [0] + [m.end() for m in _SEPARATOR.finditer(text)]
    ends = [m.start() for m in _SEPARATOR.finditer(text)] + [len(text)]
    for start, end in zip(starts, ends, strict=True):
        chunk = text[start:end]
        line = text.count("\n", 0, start) + 1
        if not chunk.strip():
            continue
        template = _GO_TEMPLATE.search(chunk)
        if template:
            at = line + chunk.count("\n", 0, template.start())
            snippet = chunk[template.start() : chunk.find("}}", template.start()) + 2]
            rule = (
                f"line {at}: Go template placeholder {snippet!r} is not valid in a manifest; render the "
                "template first (scheduler_perf templates: replace {{.Index}} by the object's index)"
            )
            out.append((line, _doc_error(rule)))
            continue
        try:
            docs = list(yaml.load_all(chunk, Loader=_Loader))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {line + mark.line}: " if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).split("\n", 1)[0]
            out.append((line, _doc_error(f"error parsing YAML: {where}{problem}")))
            continue
        except (RecursionError, ValueError, OverflowError) as exc:
            out.append((line, _doc_error(f"error parsing YAML: {exc}")))
            continue
        out.extend((line, d) for d in docs if d is not None)
    return out


def _decode(source: str, document: int, line: int, raw: Any, item: int | None) -> LoadResult:
    try:
        obj = decode_object(raw)
    except ApiError as exc:
        return LoadResult(source=source, document=document, line=line, item=item, raw=raw, error=exc)
    except (ValueError, RecursionError) as exc:
        err = _doc_error(str(exc) or "document nested too deeply", raw)
        return LoadResult(source=source, document=document, line=line, item=item, raw=raw, error=err)
    return LoadResult(source=source, document=document, line=line, item=item, raw=raw, obj=obj)


def _is_list(raw: dict[str, Any]) -> bool:
    kind = raw.get("kind")
    return isinstance(kind, str) and kind.endswith("List") and isinstance(raw.get("items"), list)


def load_manifests(source: str | bytes | Path, *, name: str | None = None) -> list[LoadResult]:
    """Every object in a file (Path) or text, each decoded to its v1 Struct or refused.

    A ``str`` is manifest text (not a file name); pass a ``Path`` to read a file. ``name`` labels
    the results (defaults to the path, or ``<input>``).
    """
    data: str | bytes
    if isinstance(source, Path):
        label = name or str(source)
        try:
            data = source.read_bytes()
        except OSError as exc:
            return [LoadResult(source=label, document=0, line=1, error=_doc_error(f"cannot read: {exc}"))]
    else:
        label = name or "<input>"
        data = source
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            err = _doc_error(f"not valid UTF-8 (byte {exc.start}): manifests must be UTF-8 text")
            return [LoadResult(source=label, document=0, line=1, error=err)]
    else:
        text = data.removeprefix("\ufeff")
    results: list[LoadResult] = []
    for document, (line, parsed) in enumerate(parse_documents(text)):
        try:
            raw = parsed if isinstance(parsed, ApiError) else _to_json(parsed, [MAX_NODES])
        except (ValueError, RecursionError) as exc:
            err = _doc_error(str(exc) or "document nested too deeply", parsed)
            results.append(LoadResult(source=label, document=document, line=line, error=err))
            continue
        if isinstance(raw, ApiError):
            results.append(LoadResult(source=label, document=document, line=line, error=raw))
        elif isinstance(raw, dict) and _is_list(raw):
            for item, entry in enumerate(raw["items"]):
                results.append(_decode(label, document, line, entry, item))
        elif not isinstance(raw, dict):
            got = "a list" if isinstance(raw, list) else f"a {type(raw).__name__} value"
            err = _doc_error(f"a document must be an object with apiVersion and kind, got {got}")
            results.append(LoadResult(source=label, document=document, line=line, raw=raw, error=err))
        else:
            results.append(_decode(label, document, line, raw, None))
    return results
