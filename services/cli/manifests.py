"""Reading ``-f FILE|DIR|-`` as kubectl does: files, directories (``-R`` recursive), stdin.

Each file may hold several YAML documents or JSON, and ``kind: List`` wrappers are unwrapped;
documents are split and parsed by ``draflow.events.api.loader.parse_documents`` (the project's one YAML
reader), so a syntax error costs only its own document. The manifests themselves are decoded by
the apiserver, never here: the server is the one place that decides what is valid.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NamedTuple

from draflow.events.api.classic_pod import normalize_manifest
from draflow.events.api.classic_v1alpha1 import API_VERSION as CLASSIC_API_VERSION
from draflow.events.api.errors import ApiError
from draflow.events.api.loader import parse_documents
from draflow.services.cli.main import UserError

__all__ = ["Doc", "read_manifests"]

EXTENSIONS = (".json", ".yaml", ".yml")


class Doc(NamedTuple):
    """One manifest from a source, or the reason it could not be read (kubectl's ``error:`` text)."""

    source: str
    manifest: Any = None
    error: str = ""


def _files(arg: str, recursive: bool) -> list[Path]:
    path = Path(arg)
    if path.is_dir():
        found = path.rglob("*") if recursive else path.iterdir()
        return sorted(p for p in found if p.is_file() and p.suffix in EXTENSIONS)
    if path.exists():
        return [path]
    raise UserError(f'the path "{arg}" does not exist')


def _kindless_classic(entry: Any) -> bool:
    return isinstance(entry, dict) and entry.get("apiVersion") == CLASSIC_API_VERSION and "kind" not in entry


def _missing(manifest: dict[str, Any]) -> list[str]:
    return [f"{k} not set" for k in ("apiVersion", "kind") if not manifest.get(k)]


def parse_text(data: bytes, source: str) -> list[Doc]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return [Doc(source, error=f"error parsing {source}: not valid UTF-8 (byte {exc.start})")]
    docs: list[Doc] = []
    for _, raw in parse_documents(text):
        if isinstance(raw, ApiError):
            detail = "; ".join(e.rule for e in raw.errors) or str(raw)
            docs.append(Doc(source, error=f"error parsing {source}: {detail}"))
            continue
        items = raw.get("items") if isinstance(raw, dict) else None
        kind = raw.get("kind") if isinstance(raw, dict) else None
        entries = (
            items if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list) else [raw]
        )
        for entry in entries:
            if _kindless_classic(entry):
                try:  # the KEP's ResourceClass is written without a kind: infer it, as the server does
                    entry = normalize_manifest(entry)
                except ApiError as exc:
                    rules = "; ".join(e.rule for e in exc.errors)
                    error = f'error validating "{source}": error validating data: [{rules}]'
                    docs.append(Doc(source, error=error))
                    continue
            if not isinstance(entry, dict):
                got = "a list" if isinstance(entry, list) else f"a {type(entry).__name__} value"
                docs.append(
                    Doc(source, error=f'error validating "{source}": a document must be an object, got {got}')
                )
            elif missing := _missing(entry):
                docs.append(
                    Doc(
                        source,
                        error=f'error validating "{source}": error validating data: [{", ".join(missing)}]; '
                        "if you choose to ignore these errors, turn validation off with --validate=false",
                    )
                )
            else:
                docs.append(Doc(source, manifest=entry))
    return docs


def read_manifests(paths: list[str], recursive: bool = False) -> list[Doc]:
    """Every manifest named by ``-f`` arguments, in order; UserError for a path that is missing."""
    if not paths:
        raise UserError("must specify one of -f and -k")
    docs: list[Doc] = []
    for arg in paths:
        if arg == "-":
            docs.extend(parse_text(sys.stdin.buffer.read(), "STDIN"))
            continue
        for file in _files(arg, recursive):
            try:
                data = file.read_bytes()
            except OSError as exc:
                raise UserError(f'cannot read "{file}": {exc.strerror or exc}') from None
            docs.extend(parse_text(data, str(file)))
    return docs
