"""The kubelet's DRA checkpoint: ``{"Data": <json string>, "Checksum": crc32(Data)}``.

Byte-compatible with upstream ``pkg/kubelet/cm/dra/checkpoint``: ``Data`` is the JSON of
``{kind: DRACheckpoint, apiVersion: checkpoint.dra.kubelet.k8s.io/v1, Entries: [...]}`` as Go's
``encoding/json`` writes it (no spaces, struct fields in declaration order, map keys sorted, a
pod-uid set as ``{"uid":{}}``, empty lists as ``null``, ``<``/``>``/``&`` escaped), and the checksum
is CRC-32 (IEEE) of those bytes. A checksum mismatch is :class:`CorruptCheckpointError`; the
kubelet must then refuse to start rather than forget prepared claims. Entries are written sorted
by namespace and name (upstream's order is a Go map's).
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from draflow.services.kubelet.state import ClaimInfo, DeviceState

__all__ = [
    "CHECKPOINT_API_VERSION",
    "CHECKPOINT_FILE",
    "CHECKPOINT_KIND",
    "CheckpointError",
    "CorruptCheckpointError",
    "decode_checkpoint",
    "encode_checkpoint",
    "read_checkpoint",
    "write_checkpoint",
]

CHECKPOINT_KIND = "DRACheckpoint"
CHECKPOINT_API_VERSION = "checkpoint.dra.kubelet.k8s.io/v1"
CHECKPOINT_FILE = "dra_manager_state"


class CheckpointError(ValueError):
    """The checkpoint file cannot be read (bad JSON or shape)."""


class CorruptCheckpointError(CheckpointError):
    """The stored checksum does not match the data."""

    def __init__(self, actual: int, expected: int) -> None:
        super().__init__(f"checkpoint is corrupted (checksum {actual}, data hashes to {expected})")
        self.actual = actual
        self.expected = expected


def _go_json(value: Any) -> str:
    """``encoding/json.Marshal`` output for plain JSON values built in Go field order."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _entry(info: ClaimInfo) -> dict[str, Any]:
    return {
        "ClaimUID": info.claim_uid,
        "ClaimName": info.claim_name,
        "Namespace": info.namespace,
        "PodUIDs": {uid: {} for uid in sorted(info.pod_uids)},
        "DriverState": {
            driver: {
                "Devices": [
                    {
                        "PoolName": d.pool_name,
                        "DeviceName": d.device_name,
                        "RequestNames": list(d.request_names) or None,
                        "CDIDeviceIDs": list(d.cdi_device_ids) or None,
                    }
                    for d in info.driver_state[driver]
                ]
                or None
            }
            for driver in sorted(info.driver_state)
        },
    }


def encode_checkpoint(infos: Iterable[ClaimInfo]) -> bytes:
    """The checkpoint file's bytes for these claim infos."""
    ordered = sorted(infos, key=lambda i: (i.namespace, i.claim_name, i.claim_uid))
    data = _go_json(
        {
            "kind": CHECKPOINT_KIND,
            "apiVersion": CHECKPOINT_API_VERSION,
            "Entries": [_entry(i) for i in ordered],
        }
    )
    checksum = zlib.crc32(data.encode("utf-8"))
    return _go_json({"Data": data, "Checksum": checksum}).encode("utf-8")


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CheckpointError(f"checkpoint: {where}: expected a list of strings")
    return tuple(value)


def _decode_entry(raw: Any, i: int) -> ClaimInfo:
    if not isinstance(raw, dict):
        raise CheckpointError(f"checkpoint: Entries[{i}]: expected an object")
    drivers: dict[str, list[DeviceState]] = {}
    for driver, state in (raw.get("DriverState") or {}).items():
        devices = []
        for j, dev in enumerate((state or {}).get("Devices") or []):
            where = f"Entries[{i}].DriverState[{driver}].Devices[{j}]"
            devices.append(
                DeviceState(
                    pool_name=str(dev.get("PoolName", "")),
                    device_name=str(dev.get("DeviceName", "")),
                    request_names=_strings(dev.get("RequestNames"), f"{where}.RequestNames"),
                    cdi_device_ids=_strings(dev.get("CDIDeviceIDs"), f"{where}.CDIDeviceIDs"),
                )
            )
        drivers[driver] = devices
    return ClaimInfo(
        claim_uid=str(raw.get("ClaimUID", "")),
        claim_name=str(raw.get("ClaimName", "")),
        namespace=str(raw.get("Namespace", "")),
        pod_uids=set((raw.get("PodUIDs") or {}).keys()),
        driver_state=drivers,
    )


def decode_checkpoint(blob: bytes) -> list[ClaimInfo]:
    """Claim infos from checkpoint bytes; verifies the checksum before trusting the data."""
    try:
        outer = json.loads(blob)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"checkpoint: invalid JSON: {exc}") from None
    if not isinstance(outer, dict) or not isinstance(outer.get("Data"), str):
        raise CheckpointError('checkpoint: expected an object with a string "Data"')
    data: str = outer["Data"]
    stored = outer.get("Checksum")
    expected = zlib.crc32(data.encode("utf-8"))
    if stored != expected:
        raise CorruptCheckpointError(stored if isinstance(stored, int) else -1, expected)
    try:
        inner = json.loads(data)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint: Data: invalid JSON: {exc}") from None
    if not isinstance(inner, dict):
        raise CheckpointError("checkpoint: Data: expected an object")
    if inner.get("kind") != CHECKPOINT_KIND or inner.get("apiVersion") != CHECKPOINT_API_VERSION:
        raise CheckpointError(
            f"checkpoint: unsupported kind/apiVersion {inner.get('kind')!r}/{inner.get('apiVersion')!r}"
        )
    return [_decode_entry(raw, i) for i, raw in enumerate(inner.get("Entries") or [])]


def write_checkpoint(state_dir: Path, infos: Iterable[ClaimInfo], name: str = CHECKPOINT_FILE) -> Path:
    """Write atomically and durably: a kubelet killed mid-write keeps the previous checkpoint."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / name
    tmp = path.with_name(f".{name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(encode_checkpoint(infos))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def read_checkpoint(state_dir: Path, name: str = CHECKPOINT_FILE) -> list[ClaimInfo]:
    """Claim infos from the state dir; no file yet means nothing was prepared."""
    path = state_dir / name
    if not path.exists():
        return []
    return decode_checkpoint(path.read_bytes())
