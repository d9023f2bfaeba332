"""Backing up and restoring the log with JetStream's own stream snapshots.

A snapshot is the server's copy of a stream's storage (its messages with their sequences,
timestamps and headers, and its configuration and state), streamed in chunks to a subject we
listen on and acknowledged chunk by chunk; a restore sends the chunks back to the subject the
server names and the server rebuilds the stream from them, sequence for sequence. Nothing is
re-published, so every resourceVersion (a stream sequence) survives.

A backup file is a tar archive with, per stream (the event log and its dead letters), the
stream's info as JSON and its snapshot. Only the admin credential may take or restore one.
"""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

__all__ = ["BackupError", "StreamBackup", "read_backup", "restore_stream", "snapshot_stream", "write_backup"]

CHUNK = 128 * 1024
FORMAT = "draflow-backup/1"


class BackupError(Exception):
    """A snapshot or restore the server refused, or a file that is not a backup."""


@dataclass(frozen=True)
class StreamBackup:
    name: str
    info: dict[str, Any]  # the stream's config and state when the snapshot began
    snapshot: bytes


def _status(msg: Msg) -> str:
    """A message's status header line ("" for plain messages)."""
    headers = msg.headers or {}
    return str(headers.get("Status", "") or "")


async def _api(nc: Client, subject: str, body: dict[str, Any], timeout_s: float = 10.0) -> dict[str, Any]:
    reply = await nc.request(subject, json.dumps(body).encode(), timeout=timeout_s)
    out: dict[str, Any] = json.loads(reply.data)
    if out.get("error"):
        err = out["error"]
        code = err.get("err_code", err.get("code"))
        raise BackupError(f"{subject}: {err.get('description', err)} (code {code})")
    return out


async def snapshot_stream(nc: Client, stream: str, *, idle_timeout_s: float = 30.0) -> StreamBackup:
    """The stream's snapshot as the server streams it (consistent at its start; writers go on)."""
    info = await _api(nc, f"$JS.API.STREAM.INFO.{stream}", {})
    inbox = nc.new_inbox()
    chunks: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_chunk(msg: Msg) -> None:
        chunks.put_nowait(msg)

    sub = await nc.subscribe(inbox, cb=on_chunk)
    try:
        await _api(
            nc,
            f"$JS.API.STREAM.SNAPSHOT.{stream}",
            {"deliver_subject": inbox, "no_consumers": True, "chunk_size": CHUNK},
        )
        out = io.BytesIO()
        while True:
            try:
                msg = await asyncio.wait_for(chunks.get(), idle_timeout_s)
            except TimeoutError:
                raise BackupError(f"snapshot of {stream}: no data for {idle_timeout_s}s") from None
            status = _status(msg)
            if status and not status.startswith("2"):
                description = (msg.headers or {}).get("Description", "")
                raise BackupError(f"snapshot of {stream}: server status {status} {description}".strip())
            if not msg.data:  # the end
                break
            out.write(msg.data)
            if msg.reply:  # acknowledge the chunk: the server sends on within its window
                await nc.publish(msg.reply, b"")
    finally:
        await sub.unsubscribe()
    return StreamBackup(stream, {"config": info["config"], "state": info["state"]}, out.getvalue())


async def restore_stream(nc: Client, backup: StreamBackup, *, timeout_s: float = 30.0) -> dict[str, Any]:
    """Create the stream from a snapshot (it must not exist); returns the restored stream's info."""
    started = await _api(nc, f"$JS.API.STREAM.RESTORE.{backup.name}", backup.info)
    deliver = started["deliver_subject"]
    data = backup.snapshot
    for offset in range(0, len(data), CHUNK):
        reply = await nc.request(deliver, data[offset : offset + CHUNK], timeout=timeout_s)
        if reply.data:
            answer = json.loads(reply.data)
            if answer.get("error"):
                raise BackupError(f"restore of {backup.name}: {answer['error'].get('description')}")
    done = await nc.request(deliver, b"", timeout=timeout_s)  # the end: the server builds the stream
    answer = json.loads(done.data)
    if answer.get("error"):
        raise BackupError(f"restore of {backup.name}: {answer['error'].get('description')}")
    info: dict[str, Any] = answer.get("stream_info") or answer
    return info


def write_backup(path: Path, backups: list[StreamBackup]) -> None:
    with tarfile.open(path, "w") as tar:
        manifest = {"format": FORMAT, "taken": time.time(), "streams": [b.name for b in backups]}
        _add(tar, "manifest.json", json.dumps(manifest).encode())
        for b in backups:
            _add(tar, f"{b.name}.json", json.dumps(b.info).encode())
            _add(tar, f"{b.name}.snapshot", b.snapshot)


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(data)
    member.mtime = int(time.time())
    member.mode = 0o600
    tar.addfile(member, io.BytesIO(data))


def read_backup(path: Path) -> list[StreamBackup]:
    try:
        with tarfile.open(path, "r") as tar:

            def read(name: str) -> bytes:
                f = tar.extractfile(name)
                if f is None:
                    raise KeyError(name)
                return f.read()

            manifest = json.loads(read("manifest.json"))
            if manifest.get("format") != FORMAT:
                raise BackupError(f"{path}: not a draflow backup (format {manifest.get('format')!r})")
            return [
                StreamBackup(name, json.loads(read(f"{name}.json")), read(f"{name}.snapshot"))
                for name in manifest["streams"]
            ]
    except (tarfile.TarError, KeyError, ValueError, OSError) as exc:
        raise BackupError(f"{path}: not a readable draflow backup ({exc})") from None
