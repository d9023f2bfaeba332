"""Archive segments: history moved out of the event stream into verified, immutable files.

A segment holds a contiguous range of stream sequences ``first..last`` as stored messages
(sequence, subject, payload, headers, storage time), in frames of up to ``FRAME`` records, each
frame a 4-byte length then zlib-compressed msgpack. Next to it a manifest (JSON) says what it
holds: its range, the record count, the SHA-256 of the file and a content hash over the records
themselves (independent of the encoding), the stream's identity and the storage times of its
first and last record. The manifest is written last, so a segment without one is a write that
did not finish and is ignored (and rewritten by the next archive run).

Files live under ``$DRAFLOW_ARCHIVE_DIR`` (default ``$DRAFLOW_DATA_DIR/archive``), one folder per
stream: ``<stream>/<first>-<last>.seg`` and ``.json``. Any directory works, a mounted bucket
included (docs/history.md): segments never change once written.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from draflow.infra.config import Settings
from draflow.infra.reader import RawRecord
from draflow.projections.base import subject_matches

__all__ = [
    "FRAME",
    "Archive",
    "ArchiveCorrupt",
    "SegmentInfo",
    "SegmentWriter",
    "archive_dir",
    "record_row",
]

FRAME = 512
FORMAT = 1
_LEN = struct.Struct(">I")
_enc = msgspec.msgpack.Encoder()
_rows = msgspec.msgpack.Decoder(list[tuple[int, str, bytes, bytes | None, int]])


class ArchiveCorrupt(Exception):
    """A segment does not match its manifest (count, range or hash)."""


class SegmentInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A segment's manifest."""

    format: int = FORMAT
    stream: str
    identity: str  # the stream's creation time: segments of a re-created stream are another log
    first: int
    last: int
    count: int
    sha256: str  # of the segment file
    content_sha256: str  # of the records (sequence, subject, payload, headers, time)
    first_ts_ns: int = 0
    last_ts_ns: int = 0
    # every subject the segment holds, sorted: a read of one aggregate skips the segments without it
    subjects: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.first:012d}-{self.last:012d}"


def archive_dir(settings: Settings, environ: dict[str, str] | None = None) -> Path:
    """Where the archive of this system's stream lives."""
    env = os.environ if environ is None else environ
    base = Path(env.get("DRAFLOW_ARCHIVE_DIR") or settings.data_dir / "archive")
    return base / settings.stream


def record_row(rec: RawRecord) -> tuple[int, str, bytes, bytes | None, int]:
    """A stored message as a segment keeps it (subject and storage time resolved)."""
    ts = rec.ts_ns
    if not ts:
        t = rec.time
        ts = int(t.timestamp() * 1e9) if t is not None else 0
    return (rec.seq, rec.subject, rec.data, rec.headers, ts)


def _content_hash(rows: Iterable[tuple[int, str, bytes, bytes | None, int]], h: Any) -> int:
    n = 0
    for row in rows:
        h.update(_enc.encode(row))
        n += 1
    return n


class SegmentWriter:
    """Writes one segment: records in order, then :meth:`finish` verifies and publishes it."""

    def __init__(self, folder: Path, stream: str, identity: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.stream = stream
        self.identity = identity
        self.tmp = folder / f".writing-{os.getpid()}.seg"
        self._file = self.tmp.open("wb")
        self._frame: list[tuple[int, str, bytes, bytes | None, int]] = []
        self._content = hashlib.sha256()
        self._subjects: set[str] = set()
        self.count = 0
        self.first = 0
        self.last = 0
        self.first_ts = 0
        self.last_ts = 0

    def add(self, records: Iterable[RawRecord]) -> None:
        for rec in records:
            row = record_row(rec)
            if self.count and row[0] != self.last + 1:
                raise ArchiveCorrupt(f"segment {self.first}..: sequence {row[0]} after {self.last}")
            if not self.count:
                self.first, self.first_ts = row[0], row[4]
            self.last, self.last_ts = row[0], row[4]
            self.count += 1
            self._content.update(_enc.encode(row))
            self._subjects.add(row[1])
            self._frame.append(row)
            if len(self._frame) >= FRAME:
                self._flush()

    def _flush(self) -> None:
        if self._frame:
            blob = zlib.compress(_enc.encode(self._frame), 6)
            self._file.write(_LEN.pack(len(blob)) + blob)
            self._frame = []

    def finish(self) -> SegmentInfo:
        """Flush, fsync, read the file back and check it holds exactly what was added, then move
        it in place and write its manifest (last, atomically)."""
        self._flush()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        info = SegmentInfo(
            stream=self.stream,
            identity=self.identity,
            first=self.first,
            last=self.last,
            count=self.count,
            sha256=_file_hash(self.tmp),
            content_sha256=self._content.hexdigest(),
            first_ts_ns=self.first_ts,
            last_ts_ns=self.last_ts,
            subjects=tuple(sorted(self._subjects)),
        )
        verify(self.tmp, info)
        final = self.folder / f"{info.name}.seg"
        os.replace(self.tmp, final)
        manifest = self.folder / f"{info.name}.json"
        tmp = self.folder / f".writing-{os.getpid()}.json"
        tmp.write_bytes(msgspec.json.encode(info))
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, manifest)
        _fsync_dir(self.folder)
        return info

    def abort(self) -> None:
        self._file.close()
        self.tmp.unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _frames(path: Path) -> Iterator[list[tuple[int, str, bytes, bytes | None, int]]]:
    with path.open("rb") as f:
        while head := f.read(_LEN.size):
            if len(head) < _LEN.size:
                raise ArchiveCorrupt(f"{path}: truncated frame header")
            (size,) = _LEN.unpack(head)
            blob = f.read(size)
            if len(blob) < size:
                raise ArchiveCorrupt(f"{path}: truncated frame")
            yield _rows.decode(zlib.decompress(blob))


def verify(path: Path, info: SegmentInfo) -> None:
    """Raise :class:`ArchiveCorrupt` unless the file has the manifest's hash, count, range and content."""
    if _file_hash(path) != info.sha256:
        raise ArchiveCorrupt(f"{path}: SHA-256 differs from its manifest")
    h = hashlib.sha256()
    n, first, last = 0, 0, 0
    for rows in _frames(path):
        n += _content_hash(rows, h)
        if rows:
            first = first or rows[0][0]
            last = rows[-1][0]
    if (n, first, last) != (info.count, info.first, info.last) or info.count != info.last - info.first + 1:
        raise ArchiveCorrupt(
            f"{path}: holds {n} records {first}..{last}, "
            f"its manifest says {info.count} {info.first}..{info.last}"
        )
    if h.hexdigest() != info.content_sha256:
        raise ArchiveCorrupt(f"{path}: content hash differs from its manifest")


class Archive:
    """The archive segments of one stream, read in sequence order like the stream itself."""

    def __init__(self, folder: Path, all_events: str = "") -> None:
        self.folder = folder
        self.all_events = all_events  # the filter matching every event (no per-record matching)
        self._cache: tuple[float, list[SegmentInfo]] | None = None
        self._subjects: dict[str, frozenset[str]] = {}  # segment name -> its subjects
        self._verified: set[tuple[str, float]] = set()  # (segment name, file mtime) hashed once

    def segments(self, identity: str | None = None) -> list[SegmentInfo]:
        """Complete segments (with a manifest), in order; only the stream ``identity``'s when given."""
        try:
            mtime = self.folder.stat().st_mtime
        except FileNotFoundError:
            return []
        if self._cache is None or self._cache[0] != mtime:
            found = []
            for manifest in self.folder.glob("*.json"):
                if manifest.name.startswith("."):
                    continue
                try:
                    found.append(msgspec.json.decode(manifest.read_bytes(), type=SegmentInfo))
                except (msgspec.DecodeError, OSError):
                    continue
            self._cache = (mtime, sorted(found, key=lambda s: s.first))
        segs = self._cache[1]
        return [s for s in segs if identity is None or s.identity == identity]

    def contiguous(self, identity: str | None = None) -> list[SegmentInfo]:
        """The segments that form one run ending at the newest: a gap cuts off what is before it."""
        segs = self.segments(identity)
        run: list[SegmentInfo] = []
        for seg in reversed(segs):
            if run and seg.last + 1 != run[-1].first:
                break
            if not run or seg.last < run[-1].first:
                run.append(seg)
        return run[::-1]

    def read(
        self, segs: list[SegmentInfo], subject_filter: str, from_seq: int, to_seq: int | None, batch: int
    ) -> Iterator[list[RawRecord]]:
        """Records of ``segs`` matching the filter within ``from_seq..to_seq``, in batches.
        Each segment's file is checked against its manifest's hash before it is read."""
        everything = subject_filter == self.all_events
        literal = not any(c in subject_filter for c in "*>")
        out: list[RawRecord] = []
        for seg in segs:
            if seg.last < from_seq or (to_seq is not None and seg.first > to_seq):
                continue
            if literal and seg.subjects:
                held = self._subjects.get(seg.name)
                if held is None:
                    held = self._subjects[seg.name] = frozenset(seg.subjects)
                if subject_filter not in held:
                    continue
            path = self.folder / f"{seg.name}.seg"
            key = (seg.name, path.stat().st_mtime)
            if key not in self._verified:
                if _file_hash(path) != seg.sha256:
                    raise ArchiveCorrupt(f"{path}: SHA-256 differs from its manifest")
                self._verified.add(key)
            for rows in _frames(path):
                for seq, subject, data, headers, ts in rows:
                    if seq < from_seq or (to_seq is not None and seq > to_seq):
                        continue
                    if not everything and not subject_matches(subject_filter, subject):
                        continue
                    out.append(RawRecord(seq, subject.encode(), data, headers, ts))
                    if len(out) >= batch:
                        yield out
                        out = []
        if out:
            yield out
