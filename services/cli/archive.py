"""``draflow archive``: move history older than the retention out of the stream (admin).

See ``draflow.services.runtime.archiving`` for the steps and docs/history.md for the contract.
"""

from __future__ import annotations

import argparse
import asyncio
import re

from draflow.infra.archive import ArchiveCorrupt
from draflow.infra.auth.roles import ADMIN
from draflow.infra.config import Settings
from draflow.services.cli.connection import add_nats_url_arg
from draflow.services.cli.export import connect_store, settings_with_url
from draflow.services.cli.main import UserError
from draflow.services.runtime.archiving import (
    SEGMENT_EVENTS,
    ArchiveRefused,
    ArchiveRun,
    Retention,
    archive_and_trim,
)

__all__ = ["archive", "parse_duration", "register"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``12h``, ``7d`` or plain seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if m is None:
        raise UserError(f"--older-than: {text!r} is not a duration (e.g. 7d, 12h, 30m, 90s)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


async def archive(
    settings: Settings, retention: Retention, *, margin: int, segment_events: int = SEGMENT_EVENTS
) -> ArchiveRun:
    store = await connect_store(settings)
    try:
        return await archive_and_trim(store, retention, margin=margin, segment_events=segment_events)
    except (ArchiveRefused, ArchiveCorrupt, OSError) as exc:
        raise UserError(f"archive: {exc}") from None
    finally:
        await store.close()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "archive", help="move history older than the retention to archive segments, trim the stream (admin)"
    )
    p.add_argument("--older-than", help="archive events older than this (default DRAFLOW_RETENTION_S or 7d)")
    p.add_argument("--max-bytes", type=int, help="keep about this many bytes of newest events in the stream")
    p.add_argument("--margin", type=int, default=1024, help="archived events left in the stream")
    p.add_argument("--segment-events", type=int, default=SEGMENT_EVENTS, help="events per archive segment")
    add_nats_url_arg(p)
    p.set_defaults(func=run_archive)


def run_archive(args: argparse.Namespace) -> int:
    env = Retention.from_env()
    older = parse_duration(args.older_than) if args.older_than is not None else env.older_than_s
    retention = Retention(older, args.max_bytes if args.max_bytes is not None else env.max_bytes)
    settings = settings_with_url(args.nats_url, ADMIN)
    run = asyncio.run(archive(settings, retention, margin=args.margin, segment_events=args.segment_events))
    for seg in run.segments:
        print(f"archived {seg.first}-{seg.last} ({seg.count} events, sha256 {seg.sha256[:12]})")
    if run.reason:
        print(run.reason)
    print(
        f"stream now holds {run.first_after}-{run.last} (was {run.first_before}-{run.last}); "
        f"archived up to {run.cut}; covering snapshot at {run.snapshot}"
    )
    return 0
