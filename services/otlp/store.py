"""Spans in SQLite (WAL): one row per span, plus an index of attribute values per trace.

Indexed for the questions ``draflow trace`` and the query API ask: a trace by id, the traces of a
service, the traces in which some span carries an attribute (``k8s.pod.name``, ``draflow.saga.id``,
``messaging.destination.name`` - the subject an event was appended to, ...). Every scalar
attribute of every span (and its service's resource) is indexed, so a new attribute a service
starts to set can be searched without a change here. Re-exported spans replace their row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from draflow.services.otlp.model import SpanRecord

__all__ = ["SpanStore", "TraceQuery"]

MAX_INDEXED_VALUE = 512

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    service TEXT NOT NULL,
    name TEXT NOT NULL,
    start_ns INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (trace_id, span_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS spans_by_service ON spans (service, start_ns);
CREATE INDEX IF NOT EXISTS spans_by_start ON spans (start_ns);
CREATE TABLE IF NOT EXISTS tags (
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    PRIMARY KEY (key, value, trace_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tags_by_trace ON tags (trace_id);
"""

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(SpanRecord)


class TraceQuery(msgspec.Struct, kw_only=True):
    service: str = ""
    operation: str = ""
    tags: dict[str, str] = {}
    start_us: int = 0  # traces with a span starting at or after this (µs since the epoch), 0 = any
    end_us: int = 0
    limit: int = 20


def tag_text(value: Any) -> str | None:
    """The indexed text of an attribute value (None: not indexed, e.g. lists)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        text = str(value)
        return text if len(text) <= MAX_INDEXED_VALUE else None
    return None


class SpanStore:
    """``max_spans``: when more are stored, whole traces are dropped, oldest first (0 = keep all)."""

    def __init__(self, path: Path, max_spans: int = 0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_spans = max_spans
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        self._stored = self.count() if max_spans else 0  # an upper bound (replaced rows count twice)

    def close(self) -> None:
        self.db.close()

    def add(self, spans: Sequence[SpanRecord]) -> int:
        """Store spans (one transaction); returns how many."""
        rows = [(s.trace_id, s.span_id, s.service, s.name, s.start_ns, _enc.encode(s)) for s in spans]
        tags: set[tuple[str, str, str]] = set()
        for s in spans:
            for attrs in (s.attributes, s.resource):
                for key, value in attrs.items():
                    text = tag_text(value)
                    if text is not None:
                        tags.add((key, text, s.trace_id))
            tags.add(("span.name", s.name, s.trace_id))
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany("INSERT OR REPLACE INTO spans VALUES (?, ?, ?, ?, ?, ?)", rows)
            self.db.executemany("INSERT OR IGNORE INTO tags VALUES (?, ?, ?)", sorted(tags))
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        self._stored += len(rows)
        if self.max_spans and self._stored > self.max_spans:
            self.prune()
        return len(rows)

    def prune(self) -> int:
        """Drop the oldest traces until at most ``max_spans`` spans are left; returns spans dropped."""
        self._stored = self.count()
        excess = self._stored - self.max_spans
        if excess <= 0:
            return 0
        doomed: list[str] = []
        dropped = 0
        cur = self.db.execute(
            "SELECT trace_id, COUNT(*), MIN(start_ns) AS first FROM spans GROUP BY trace_id ORDER BY first"
        )
        for trace_id, n, _ in cur:
            if dropped >= excess:
                break
            doomed.append(trace_id)
            dropped += n
        self.db.execute("BEGIN IMMEDIATE")
        self.db.executemany("DELETE FROM spans WHERE trace_id = ?", [(t,) for t in doomed])
        self.db.executemany("DELETE FROM tags WHERE trace_id = ?", [(t,) for t in doomed])
        self.db.execute("COMMIT")
        self._stored -= dropped
        return dropped

    def trace(self, trace_id: str) -> list[SpanRecord]:
        cur = self.db.execute(
            "SELECT body FROM spans WHERE trace_id = ? ORDER BY start_ns, span_id", (trace_id.lower(),)
        )
        return [_dec.decode(row[0]) for row in cur]

    def traces(self, trace_ids: Iterable[str]) -> list[list[SpanRecord]]:
        return [t for t in (self.trace(tid) for tid in trace_ids) if t]

    def services(self) -> list[str]:
        return [row[0] for row in self.db.execute("SELECT DISTINCT service FROM spans ORDER BY service")]

    def operations(self, service: str) -> list[str]:
        cur = self.db.execute("SELECT DISTINCT name FROM spans WHERE service = ? ORDER BY name", (service,))
        return [row[0] for row in cur]

    def find(self, q: TraceQuery) -> list[str]:
        """Trace ids matching every condition (each may be met by a different span), newest first."""
        parts: list[str] = []
        params: list[Any] = []
        if q.service:
            parts.append("SELECT trace_id FROM spans WHERE service = ?")
            params.append(q.service)
        if q.operation:
            parts.append("SELECT trace_id FROM spans WHERE name = ?")
            params.append(q.operation)
        for key, value in sorted(q.tags.items()):
            parts.append("SELECT trace_id FROM tags WHERE key = ? AND value = ?")
            params += [key, value]
        matched = " INTERSECT ".join(parts) if parts else "SELECT trace_id FROM spans"
        sql = (
            f"SELECT trace_id, MIN(start_ns) AS first FROM spans WHERE trace_id IN ({matched}) "
            "GROUP BY trace_id"
        )
        having: list[str] = []
        if q.start_us:
            having.append("first >= ?")
            params.append(q.start_us * 1000)
        if q.end_us:
            having.append("first <= ?")
            params.append(q.end_us * 1000)
        if having:
            sql += " HAVING " + " AND ".join(having)
        sql += " ORDER BY first DESC LIMIT ?"
        params.append(max(1, q.limit))
        return [row[0] for row in self.db.execute(sql, params)]

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM spans").fetchone()[0])
