"""``draflow backup FILE`` / ``draflow restore FILE``: the log saved and brought back whole.

Both use JetStream's stream snapshots (``draflow.infra.backup``) and the admin credential (found in the
data dir like every credential, or ``DRAFLOW_NATS_CREDS``). A backup can be taken while the system
runs. A restore creates the streams again with every event at its old sequence; a stream that
exists is replaced only when it is empty (a system just started) or with ``--force``. The services
notice the new stream and stop (the kubelets rebuild in place): start them again afterwards. The
disaster-recovery procedure is in ``docs/reliability.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import nats.errors

from draflow.infra.auth.roles import ADMIN
from draflow.infra.backup import (
    BackupError,
    StreamBackup,
    read_backup,
    restore_stream,
    snapshot_stream,
    write_backup,
)
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.cli.connection import add_nats_url_arg
from draflow.services.cli.export import connect_store, settings_with_url
from draflow.services.cli.main import UserError

__all__ = ["backup", "register", "restore"]


def _streams(settings: Settings) -> list[str]:
    return [settings.stream, settings.dlq_stream]


async def _info(store: EventStore, stream: str) -> dict | None:
    reply = await store.nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=10)
    info: dict = json.loads(reply.data)
    if info.get("error"):
        if info["error"].get("err_code") == 10059:  # stream not found
            return None
        raise UserError(f"stream {stream}: {info['error'].get('description')}")
    return info


async def backup(settings: Settings, path: Path) -> list[StreamBackup]:
    store = await connect_store(settings)
    try:
        taken = [await snapshot_stream(store.nc, name) for name in _streams(settings)]
    except BackupError as exc:
        raise UserError(str(exc)) from None
    except (nats.errors.Error, TimeoutError) as exc:
        raise UserError(f"backup: {exc!r}") from None
    finally:
        await store.close()
    write_backup(path, taken)
    return taken


async def restore(settings: Settings, path: Path, *, force: bool = False) -> list[dict]:
    try:
        backups = read_backup(path)
    except BackupError as exc:
        raise UserError(str(exc)) from None
    wanted = set(_streams(settings))
    if {b.name for b in backups} != wanted:
        names = ", ".join(b.name for b in backups)
        raise UserError(f"{path}: holds streams {names}, this system's are {', '.join(sorted(wanted))}")
    store = await connect_store(settings)
    restored = []
    try:
        for b in backups:
            info = await _info(store, b.name)
            if info is not None:
                held = int(info["state"]["messages"])
                if held and not force:
                    raise UserError(
                        f"stream {b.name} exists with {held} messages: restoring replaces it; stop the "
                        f"system and run draflow restore {path} --force"
                    )
                await store.js.delete_stream(b.name)
            restored.append(await restore_stream(store.nc, b))
    except BackupError as exc:
        raise UserError(str(exc)) from None
    except (nats.errors.Error, TimeoutError) as exc:
        raise UserError(f"restore: {exc!r}") from None
    finally:
        await store.close()
    return restored


def _describe(info: dict) -> str:
    state = info["state"]
    if not state["messages"]:
        return "no messages"
    return f"{state['messages']} messages (seq {state['first_seq']}-{state['last_seq']})"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("backup", help="save the event log (JetStream snapshot; admin credential)")
    p.add_argument("file", type=Path, help="the backup file to write (a tar archive)")
    add_nats_url_arg(p)
    p.set_defaults(func=run_backup)
    r = sub.add_parser("restore", help="bring a saved event log back (admin credential)")
    r.add_argument("file", type=Path, help="a file written by draflow backup")
    r.add_argument("--force", action="store_true", help="replace streams that hold events")
    add_nats_url_arg(r)
    r.set_defaults(func=run_restore)


def run_backup(args: argparse.Namespace) -> int:
    taken = asyncio.run(backup(settings_with_url(args.nats_url, ADMIN), args.file))
    for b in taken:
        print(f"stream {b.name}: {_describe(b.info)}, {len(b.snapshot)} bytes")
    print(f"backed up to {args.file}")
    return 0


def run_restore(args: argparse.Namespace) -> int:
    restored = asyncio.run(restore(settings_with_url(args.nats_url, ADMIN), args.file, force=args.force))
    for info in restored:
        print(f"stream {info['config']['name']}: restored {_describe(info)}")
    print("restart the services: each stops when its stream is replaced (docs/reliability.md)")
    return 0
