"""``draflow replay`` and ``draflow rebuild``: projections rebuilt from the log into SQLite.

``draflow replay [--to-seq N | --to-time T] --data-dir DIR`` folds the log from sequence 1 into a
fresh directory (it must not exist or be empty): ``DIR/projections.sqlite`` gets every projection of
:mod:`draflow.projections.catalog` (``heads``, ``sagas``, ``objects_<kind>``), state and checkpoint
(consumer ``replay``) in one transaction per batch, exactly as ``draflow.infra.projection_store`` persists a
live projection. A progress bar with events/s goes to stderr; the summary (rows per projection) to
stdout. ``draflow rebuild PROJECTION --data-dir DIR`` empties one projection of such a directory
and folds it again up to the directory's checkpoint, leaving the others untouched. The services
keep their projections in memory (folded from the log at start), so no data dir holds SQLite
projections but the ones ``replay`` built. Replays emit no spans (``tracing.suppressed``).

Each projection is one SQLite table, ``p_<projection>`` (``key TEXT``, ``value``: the state as
JSON), and the summary names the tables. ``draflow replay --data-dir DIR --query SQL`` runs one
read-only query on such a directory and prints the rows (JSON values as text), for when no
``sqlite3`` is at hand: ``--query "SELECT key FROM p_objects_pod"``.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import msgspec

from draflow.events.codec import DecodeError, decode
from draflow.infra import tracing
from draflow.infra.errors import PoisonEvent
from draflow.infra.eventstore import EventStore
from draflow.infra.projection_store import ProjectionStore
from draflow.projections.base import Projection
from draflow.projections.catalog import all_projections
from draflow.services.cli.asof import open_log, resolve_bound
from draflow.services.cli.common import add_connection_args
from draflow.services.cli.main import UserError
from draflow.services.runtime import printers

__all__ = ["DB_NAME", "REPLAY_CONSUMER", "register", "replay_into"]

DB_NAME = "projections.sqlite"
TABLE_PREFIX = "p_"  # a projection's SQLite table: p_<projection name> (infra.projection_store)
REPLAY_CONSUMER = "replay"


def register(sub: Any) -> None:
    p = sub.add_parser("replay", help="rebuild every projection from the log into a fresh directory")
    bound = p.add_mutually_exclusive_group()
    bound.add_argument("--to-seq", metavar="N", help="stop after stream sequence N (default: the end)")
    bound.add_argument("--to-time", metavar="T", help="stop at RFC3339 time T")
    p.add_argument("--data-dir", required=True, metavar="DIR", help="a new or empty directory")
    p.add_argument(
        "--query",
        metavar="SQL",
        help="print the rows of one read-only SQL query on the tables (p_<projection>) a replay built in DIR",
    )
    p.add_argument("--batch", type=int, default=2048, help=argparse.SUPPRESS)
    add_connection_args(p)
    p.set_defaults(func=run_replay)

    r = sub.add_parser("rebuild", help="rebuild one projection in place (see `draflow replay`)")
    r.add_argument(
        "projection",
        metavar="PROJECTION",
        help="e.g. heads, sagas, objects_pod (or its table, p_objects_pod)",
    )
    r.add_argument("--data-dir", required=True, metavar="DIR", help="a directory `draflow replay` built")
    r.add_argument("--batch", type=int, default=2048, help=argparse.SUPPRESS)
    add_connection_args(r)
    r.set_defaults(func=run_rebuild)


class Progress:
    """``[#####-----]  52%  10240/19690 events  8,210 events/s`` on stderr, redrawn in place."""

    def __init__(self, total: int, out: TextIO | None = None, width: int = 30) -> None:
        self.total = max(total, 0)
        self.out = out if out is not None else sys.stderr
        self.width = width
        self.start = time.monotonic()
        self.done = 0
        self._drawn = 0.0
        self.elapsed: float | None = None  # frozen by finish()
        self._drawn_done = -1

    def seconds(self) -> float:
        return self.elapsed if self.elapsed is not None else time.monotonic() - self.start

    def rate(self) -> float:
        elapsed = self.seconds()
        return self.done / elapsed if elapsed > 0 else 0.0

    def update(self, done: int, force: bool = False) -> None:
        self.done = done
        now = time.monotonic()
        if not force and now - self._drawn < 0.1:
            return
        self._drawn = now
        self._drawn_done = done
        frac = 1.0 if self.total == 0 else min(1.0, done / self.total)
        fill = int(frac * self.width)
        bar = "#" * fill + "-" * (self.width - fill)
        line = f"\r[{bar}] {frac * 100:3.0f}%  {done}/{self.total} events  {self.rate():,.0f} events/s"
        self.out.write(line)
        self.out.flush()

    def finish(self) -> None:
        self.elapsed = time.monotonic() - self.start
        if self._drawn_done != self.done:
            self.update(self.done, force=True)
        self.out.write("\n")
        self.out.flush()


async def replay_into(
    store: EventStore,
    db: ProjectionStore,
    consumer: str,
    to_seq: int,
    *,
    batch: int = 2048,
    progress: Progress | None = None,
) -> int:
    """Fold the log from ``db``'s checkpoint + 1 up to ``to_seq``; returns the events read.

    The same rules as a live projection consumer: undecodable events never reach a projection,
    reducer failures are skipped past (``PoisonEvent``)."""
    start = await db.checkpoint(consumer) + 1
    read = 0
    if to_seq < start:
        return 0
    async for records in store.read_raw(None, start, to_seq, batch=batch):
        async with db.transaction(consumer) as b:
            for r in records:
                try:
                    env = decode(r.data, r.seq)
                except (DecodeError, msgspec.MsgspecError):
                    b.skip(r.seq)
                    continue
                try:
                    await b.apply(env)
                except PoisonEvent:
                    b.skip(r.seq)
        read += len(records)
        if progress is not None:
            progress.update(read)
    return read


async def _counts(db: ProjectionStore, names: list[str]) -> list[tuple[str, int]]:
    out = []
    for name in names:
        async with db.db.execute(f"SELECT COUNT(*) FROM p_{name}") as cur:
            row = await cur.fetchone()
        out.append((name, int(row[0]) if row else 0))
    return out


def _bound_args(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(as_of_seq=args.to_seq, as_of_time=args.to_time)


def run_replay(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    if args.query is not None:
        if args.to_seq is not None or args.to_time is not None:
            raise UserError("--query reads a directory a replay built: no --to-seq/--to-time with it")
        return run_query(data_dir, args.query)
    if data_dir.exists() and (not data_dir.is_dir() or any(data_dir.iterdir())):
        raise UserError(f"--data-dir: {data_dir} is not empty (replay builds into a fresh directory)")
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        return asyncio.run(_replay(args, data_dir))
    except BaseException:  # leave no half-built directory behind
        for f in data_dir.glob(f"{DB_NAME}*"):
            f.unlink()
        raise


async def _replay(args: argparse.Namespace, data_dir: Path) -> int:
    async with open_log(args) as store:
        if args.to_seq is None and args.to_time is None:
            to_seq = await store.stream_last_seq()
        else:
            to_seq = await resolve_bound(store, _bound_args(args))
        projections = all_projections(store.root)
        db = await ProjectionStore.open(data_dir / DB_NAME, projections, store.root)
        try:
            progress = Progress(to_seq)
            with tracing.suppressed():
                read = await replay_into(
                    store, db, REPLAY_CONSUMER, to_seq, batch=args.batch, progress=progress
                )
            progress.finish()
            counts = await _counts(db, [p.name for p in projections])
        finally:
            await db.close()
    print(
        f"replayed {read} events (sequences 1..{to_seq}) into {data_dir / DB_NAME} "
        f"in {progress.seconds():.2f}s ({progress.rate():,.0f} events/s)"
    )
    for name, n in counts:
        print(f"  {TABLE_PREFIX + name:<34} {n} rows")
    print(f'query them: draflow replay --data-dir {data_dir} --query "SELECT key FROM p_objects_pod"')
    return 0


def run_query(data_dir: Path, sql: str) -> int:
    """One read-only query on ``data_dir``'s projections; rows as a table, JSON values as text."""
    path = data_dir / DB_NAME
    if not path.exists():
        raise UserError(
            f"{path}: no projections there (build them with `draflow replay --data-dir {data_dir}`)"
        )
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise UserError(f"{path}: {exc}") from None
    try:
        cur = db.execute(sql)
        rows = cur.fetchall()
        header = [d[0].upper() for d in cur.description or ()]
    except sqlite3.Error as exc:
        raise UserError(f"--query: {exc}") from None
    finally:
        db.close()
    if not header:
        return 0
    table = [header] + [[_cell(v) for v in row] for row in rows]
    for line in printers.format_table(table):
        print(line)
    return 0


def _cell(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "<null>" if value is None else str(value)


def run_rebuild(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    path = data_dir / DB_NAME
    if not path.exists():
        raise UserError(
            f"{path}: no projections there (build them with `draflow replay --data-dir {data_dir}`)"
        )

    async def body() -> int:
        async with open_log(args) as store:
            catalog = {p.name: p for p in all_projections(store.root)}
            name = args.projection.removeprefix(TABLE_PREFIX)
            target: Projection[Any] | None = catalog.get(name)
            if target is None:
                names = ", ".join(sorted(catalog))
                raise UserError(f'projection "{args.projection}" not found (known: {names})')
            whole = await ProjectionStore.open(path, list(catalog.values()), store.root)
            try:
                to_seq = await whole.checkpoint(REPLAY_CONSUMER)
                await whole.db.execute(f"DELETE FROM p_{target.name}")
            finally:
                await whole.close()
            one = await ProjectionStore.open(path, [target], store.root)
            consumer = f"rebuild-{target.name}"
            try:
                await one.db.execute("DELETE FROM checkpoints WHERE consumer = ?", (consumer,))
                progress = Progress(to_seq)
                with tracing.suppressed():
                    read = await replay_into(
                        store, one, consumer, to_seq, batch=args.batch, progress=progress
                    )
                progress.finish()
                # the directory keeps one checkpoint: the rebuilt projection is at it again
                await one.db.execute("DELETE FROM checkpoints WHERE consumer = ?", (consumer,))
                ((_, rows),) = await _counts(one, [target.name])
            finally:
                await one.close()
        print(
            f"rebuilt {target.name} from {read} events (sequences 1..{to_seq}): {rows} rows "
            f"({progress.rate():,.0f} events/s)"
        )
        return 0

    return asyncio.run(body())
