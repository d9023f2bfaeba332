"""Container Device Interface (CDI) specs: what a driver writes so the runtime can inject devices.

After the CDI library as dra-example-driver uses it (``tags.cncf.io/container-device-interface``):
a spec has ``cdiVersion``, ``kind`` (``<vendor>/<class>``) and ``devices`` (name +
``containerEdits``); a device is referred to by its qualified name ``<vendor>/<class>=<name>``;
per-claim ("transient") spec files are named ``<vendor>-<class>_<id>``. The version written is the
minimum the content needs, as ``cdi.MinimumRequiredVersion`` decides for env-only specs: 0.3.0, or
0.5.0 once a device name starts with a non-letter (claim uids often start with a digit).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

__all__ = [
    "CdiDevice",
    "build_spec",
    "minimum_version",
    "qualified_name",
    "read_spec",
    "remove_spec",
    "spec_file_name",
    "transient_spec_name",
    "write_spec",
]


class CdiDevice(msgspec.Struct, frozen=True, kw_only=True):
    """A CDI device whose only container edit is environment variables (``NAME=value``)."""

    name: str
    env: tuple[str, ...] = ()


def qualified_name(vendor: str, cls: str, device: str) -> str:
    """The id the runtime receives: ``vendor/class=device``."""
    return f"{vendor}/{cls}={device}"


def transient_spec_name(vendor: str, cls: str, transient_id: str) -> str:
    """Spec name for per-claim devices; ``/`` cannot appear in a file name."""
    return f"{vendor}-{cls}_{transient_id.replace('/', '_')}"


def spec_file_name(spec_name: str) -> str:
    return f"{spec_name}.json"


def minimum_version(devices: Sequence[CdiDevice]) -> str:
    """Lowest CDI spec version that allows these (env-only) devices."""
    if any(d.name and not d.name[0].isalpha() for d in devices):
        return "0.5.0"
    return "0.3.0"


def build_spec(vendor: str, cls: str, devices: Sequence[CdiDevice]) -> dict[str, Any]:
    """The spec as a JSON object."""
    return {
        "cdiVersion": minimum_version(devices),
        "kind": f"{vendor}/{cls}",
        "devices": [{"name": d.name, "containerEdits": {"env": list(d.env)}} for d in devices],
    }


def write_spec(root: Path, spec_name: str, spec: dict[str, Any]) -> Path:
    """Write atomically (temp file + rename), so a crash never leaves half a spec for the runtime."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / spec_file_name(spec_name)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_spec(root: Path, spec_name: str) -> dict[str, Any] | None:
    path = root / spec_file_name(spec_name)
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def remove_spec(root: Path, spec_name: str) -> bool:
    """Remove a spec file; False if it was not there (removal is idempotent)."""
    try:
        (root / spec_file_name(spec_name)).unlink()
    except FileNotFoundError:
        return False
    return True
