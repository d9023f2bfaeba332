"""Recorded pod lifecycles, copied: the material ``bench.history`` builds long logs from.

A recording (a ``draflow export`` of real services) is split into its cluster set-up (what comes
before the first namespace the workload creates: namespaces, DeviceClass, Node, ResourceSlice)
and one *lifecycle unit* (a namespace, a claim template, pods, claims, scheduling sagas,
Kubernetes Events, all torn down again). Each copy of the unit has its own namespace, fresh uids
and event ids (the first 8 hex digits of every uid and id carry the copy's number), and its
resourceVersions (and expected versions) moved by the copy's offset in the log.

A recording made before Events went with their namespace leaves its Events behind when the
namespace is deleted; the apiserver of today deletes them first (its namespace controller,
``Lifecycle.drain_namespace``, and at start any Events of a namespace that no longer exists).
:func:`with_namespace_drain` adds those deletions to the unit, written as that controller writes
them (``KubeEventDeleted`` by the apiserver, each expecting the Event's version, just before
``NamespaceDeleted``), so a log of copies holds what the running system would hold: no live
objects of finished lifecycles.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.harness import ROOT
from draflow.events.codec import HDR_SCHEMA, HDR_TYPE, encode, make_envelope
from draflow.events.objects import KubeEventDeleted
from draflow.infra.publisher import HDR_EXPECTED_LAST_SUBJECT_SEQ, HDR_MSG_ID

__all__ = [
    "DEFAULT_RECORDING",
    "Message",
    "Recording",
    "UnitCopier",
    "copy_unit",
    "live_events",
    "load_recording",
    "with_namespace_drain",
]

DEFAULT_RECORDING = ROOT / "tests" / "data" / "golden" / "basic-claim-template.jsonl"
UUID = re.compile(r"\b[0-9a-f]{8}(-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b")
HEX_ID = re.compile(r"\b[0-9a-f]{8}([0-9a-f]{8}(?:[0-9a-f]{8})?)\b")
RESOURCE_VERSION = re.compile(r'"resourceVersion":"(\d+)"')
BOOTSTRAP = {"default", "kube-system", "kube-public", "kube-node-lease"}


@dataclass(frozen=True)
class Message:
    subject: str  # with "{root}" for the subject root (also in the payload's envelope)
    payload: str  # the stored envelope (JSON text)
    headers: dict[str, str]


@dataclass(frozen=True)
class Recording:
    setup: list[Message]
    unit: list[Message]
    namespace: str  # the unit's namespace, renamed in each copy
    first_seq: int  # the unit's first sequence in the recording


def load_recording(path: Path) -> Recording:
    """The set-up and the lifecycle unit of a ``draflow export`` file (the unit as the apiserver
    of today writes it: :func:`with_namespace_drain`)."""
    lines = path.read_text().splitlines()
    old_root = json.loads(lines[0])["root"]
    records = [json.loads(line) for line in lines[1:]]
    namespace, first = "", 0
    for rec in records:
        parts = rec["subject"].split(".")
        if parts[2] == "Namespace" and parts[4] not in BOOTSTRAP:
            namespace, first = parts[4], rec["seq"]
            break
    if not namespace:
        raise SystemExit(f"{path}: no namespace of a workload in this recording")

    def message(rec: dict[str, Any]) -> Message:
        subject = "{root}" + rec["subject"][len(old_root) :]
        env = dict(rec["envelope"], subject=subject)
        return Message(subject, json.dumps(env, separators=(",", ":")), dict(rec["headers"]))

    setup = [message(r) for r in records if r["seq"] < first]
    unit = [message(r) for r in records if r["seq"] >= first]
    return with_namespace_drain(Recording(setup, unit, namespace, first))


def _parts(subject: str) -> tuple[str, str, str]:
    """(kind, namespace, name) of ``{root}.ev.<Kind>.<ns or _>.<name>``."""
    _, _, kind, ns, name = subject.split(".", 4)
    return kind, ("" if ns == "_" else ns), name


def live_events(messages: list[Message], first_seq: int) -> dict[str, int]:
    """The Kubernetes Events the messages (stored from ``first_seq`` on) leave alive: subject ->
    its version (the sequence of its last write)."""
    live: dict[str, int] = {}
    for i, m in enumerate(messages):
        kind, _, _ = _parts(m.subject)
        if kind != "Event":
            continue
        if m.headers.get(HDR_TYPE) == "KubeEventDeleted":
            live.pop(m.subject, None)
        else:
            live[m.subject] = first_seq + i
    return live


def _drain_id(subject: str) -> str:
    """A fixed 24-hex id per deletion (the copier tags its first 8 digits per copy, as every id)."""
    return hashlib.sha256(f"drain {subject}".encode()).hexdigest()[:24]


def with_namespace_drain(rec: Recording) -> Recording:
    """The unit with the ``KubeEventDeleted`` the namespace controller appends for the Events
    still in the namespace when it is deleted (just before ``NamespaceDeleted``; unchanged when
    the recording has them already or the namespace outlives the unit)."""
    unit = rec.unit
    ns_subject = "{root}.ev.Namespace._." + rec.namespace
    at = next(
        (
            i
            for i, m in enumerate(unit)
            if m.subject == ns_subject and m.headers.get(HDR_TYPE) == "NamespaceDeleted"
        ),
        None,
    )
    if at is None:
        return rec
    left = {
        subject: version
        for subject, version in live_events(unit[:at], rec.first_seq).items()
        if _parts(subject)[1] == rec.namespace
    }
    if not left:
        return rec
    when = datetime.datetime.fromisoformat(json.loads(unit[at].payload)["time"].replace("Z", "+00:00"))
    drained: list[Message] = []
    for subject, version in sorted(left.items(), key=lambda kv: kv[1]):
        eid = _drain_id(subject)
        env = make_envelope(KubeEventDeleted(), id=eid, subject=subject, time=when, actor="apiserver")
        headers = {
            HDR_MSG_ID: eid,
            HDR_TYPE: env.type,
            HDR_SCHEMA: str(env.schema),
            HDR_EXPECTED_LAST_SUBJECT_SEQ: str(version),
        }
        drained.append(Message(subject, encode(env).decode(), headers))
    # everything from ``at`` on moves by len(drained): its own versions (none in the recording's
    # NamespaceDeleted, the unit's last event) would have to move too
    tail = unit[at:]
    if any(RESOURCE_VERSION.search(m.payload) for m in tail):
        raise SystemExit("a recording with events after NamespaceDeleted that name versions")
    return replace(rec, unit=[*unit[:at], *drained, *tail])


def copy_unit(rec: Recording, copy: int, base_seq: int) -> list[Message]:
    """Copy number ``copy`` of the unit, stored from sequence ``base_seq`` on."""
    tag = f"{copy:08x}"
    shift = base_seq - rec.first_seq
    ns = f"churn-{copy}"
    ns_re = re.compile(rf"\b{re.escape(rec.namespace)}\b")

    def fresh(text: str) -> str:
        text = ns_re.sub(ns, text)
        text = UUID.sub(lambda m: tag + m.group(1), text)
        text = HEX_ID.sub(lambda m: tag + m.group(1), text)
        return RESOURCE_VERSION.sub(lambda m: f'"resourceVersion":"{int(m.group(1)) + shift}"', text)

    def header(key: str, value: str) -> str:
        return str(int(value) + shift) if key == HDR_EXPECTED_LAST_SUBJECT_SEQ else fresh(value)

    return [
        Message(fresh(m.subject), fresh(m.payload), {k: header(k, v) for k, v in m.headers.items()})
        for m in rec.unit
    ]


class _Template:
    """One text of the unit with its copy-dependent parts cut out, so a copy is a join, not four
    regular-expression passes (the same substitutions as :func:`copy_unit`, done once)."""

    def __init__(self, text: str, namespace: str, *, version: bool = False) -> None:
        if version:  # the whole text is a version (an expected-sequence header)
            self.parts = ["", f"r{text}", ""]
            return
        text = re.sub(rf"\b{re.escape(namespace)}\b", "\x00n\x00", text)
        text = UUID.sub(lambda m: "\x00t\x00" + m.group(1), text)
        text = HEX_ID.sub(lambda m: "\x00t\x00" + m.group(1), text)
        text = RESOURCE_VERSION.sub(lambda m: f'"resourceVersion":"\x00r{m.group(1)}\x00"', text)
        self.parts = text.split("\x00")  # literal, marker, literal, marker, ...

    def fill(self, ns: str, tag: str, shift: int) -> str:
        parts = self.parts[:]
        for i in range(1, len(parts), 2):
            marker = parts[i]
            parts[i] = ns if marker == "n" else tag if marker == "t" else str(int(marker[1:]) + shift)
        return "".join(parts)


class UnitCopier:
    """:func:`copy_unit`, several times faster: the unit's texts are templates made once."""

    def __init__(self, rec: Recording) -> None:
        self.rec = rec
        ns = rec.namespace
        self.templates = [
            (
                _Template(m.subject, ns),
                _Template(m.payload, ns),
                {
                    k: _Template(v, ns, version=k == HDR_EXPECTED_LAST_SUBJECT_SEQ)
                    for k, v in m.headers.items()
                },
            )
            for m in rec.unit
        ]

    def copy(self, copy: int, base_seq: int) -> list[Message]:
        tag, shift, ns = f"{copy:08x}", base_seq - self.rec.first_seq, f"churn-{copy}"
        return [
            Message(
                s.fill(ns, tag, shift),
                p.fill(ns, tag, shift),
                {k: h.fill(ns, tag, shift) for k, h in hs.items()},
            )
            for s, p, hs in self.templates
        ]
