"""Fold a recorded log and hold the DRA invariants (``draflow.services.dra.invariants``) against it
after every event: which event broke each rule first, which event repaired it, what was involved.

No I/O: records in, ``Breakage``s out (``draflow check`` reads the log, ``verify-replay`` passes the
records it already read, the chaos suite its run's). Safety rules are violated by the first event
that breaks them; settling rules only by a breakage that lasted longer than ``grace_s`` of log time
(measured to the event that repaired it, or to the last event checked when it still holds there).
"""

from __future__ import annotations

import collections
import datetime
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from draflow.events.api.core_v1 import Pod, ResourceQuota
from draflow.events.api.resource_v1 import ResourceClaim, ResourceSlice
from draflow.events.codec import DecodeError, decode
from draflow.events.dra import PodResourcesPrepared
from draflow.events.envelope import Envelope, Event
from draflow.events.subjects import parse_subject
from draflow.infra.eventstore import RawRecord
from draflow.projections.objects import ObjectIndex
from draflow.services.dra.invariants import RULES, Finding, Rule, State, evaluate
from draflow.services.dra.quota.state import QuotaState, status_of
from draflow.services.dra.resourceclaim import ClaimNameError, pod_claim_names
from draflow.services.quota_reconciler.reconcile import TRACKED, fold_change

__all__ = ["DEFAULT_GRACE_S", "Breakage", "LogChecker", "Step", "check_records"]

DEFAULT_GRACE_S = 60.0
FOLDED = TRACKED | {"ResourceSlice", "ClassicResourceClaim"}
CONTEXT_KINDS = frozenset({"Pod", "ResourceClaim", "ResourceQuota"})
HISTORY = 12  # events of the involved objects shown up to the breaking one


@dataclass(frozen=True)
class Step:
    """One event of the log, as the report names it."""

    seq: int
    time: datetime.datetime | None
    type: str
    subject: str  # Kind/namespace/name
    actor: str
    correlation: str

    def as_dict(self) -> dict[str, Any]:
        when = self.time.isoformat().replace("+00:00", "Z") if self.time else ""
        return {
            "seq": self.seq,
            "time": when,
            "type": self.type,
            "object": self.subject,
            "actor": self.actor,
            "correlation": self.correlation,
        }


@dataclass
class Breakage:
    """One finding from the event that made it true to the one that made it false (or the end)."""

    finding: Finding
    broken_by: Step
    repaired_by: Step | None = None
    last_seen: Step | None = None  # the last event checked while it held
    history: list[Step] = field(default_factory=list)  # the involved objects' events up to broken_by

    def lasted_s(self) -> float:
        end = self.repaired_by or self.last_seen or self.broken_by
        if end.time is None or self.broken_by.time is None:
            return 0.0
        return max(0.0, (end.time - self.broken_by.time).total_seconds())

    def violates(self, grace_s: float) -> bool:
        """Grace 0: every breakage of a settling rule counts, however short."""
        return not self.finding.rule.settles or grace_s <= 0 or self.lasted_s() > grace_s


class LogChecker:
    def __init__(self, root: str, *, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.root = root
        self.grace_s = grace_s
        self.objects = ObjectIndex()
        self.quota = QuotaState()
        self.prepared: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {}
        self.active: dict[tuple[str, tuple[str, ...]], Breakage] = {}
        self.breakages: list[Breakage] = []  # every one, in the order they started
        self.events = 0
        self.last: Step | None = None
        # the last HISTORY steps of each live object of CONTEXT_KINDS (dropped with the object)
        self._history: dict[tuple[str, str, str], collections.deque[Step]] = {}

    # -- folding --------------------------------------------------------------------------------
    def feed(self, rec: RawRecord, env: Envelope[Event] | None) -> None:
        self.events += 1
        try:
            kind, ns, name = parse_subject(rec.subject, self.root)
        except ValueError:
            kind, ns, name = "", None, ""
        ns = ns or ""
        step = Step(
            rec.seq,
            env.time if env is not None else rec.time,
            env.type if env is not None else "(undecodable)",
            f"{kind}/{ns + '/' if ns else ''}{name}",
            (env.actor if env is not None else "") or "",
            (env.correlation_id if env is not None else "") or "",
        )
        self.last = step
        if kind in CONTEXT_KINDS:
            steps = self._history.get((kind, ns, name))
            if steps is None:
                steps = self._history[(kind, ns, name)] = collections.deque(maxlen=HISTORY)
            steps.append(step)
        if kind not in FOLDED:
            self._still_holding(step)
            return
        change = (
            self.objects.apply_envelope(kind, ns, name, env)
            if env is not None
            else self.objects.touch(kind, ns, name, rec.seq)
        )
        self.objects.settle(rec.seq)  # fed in log order: deleted objects leave nothing behind
        if change is not None and kind in TRACKED:
            fold_change(self.quota, kind, ns, name, change)
        if env is not None and isinstance(env.data, PodResourcesPrepared):
            self._prepared(ns, name, env.data.node_name)
        self._forget_prepared()
        self._compare(self._findings(), step)
        if change is not None and change.type == "DELETED":
            self._history.pop((kind, ns, name), None)  # its context went into any breakage above

    def _prepared(self, ns: str, name: str, node: str) -> None:
        pod = self.objects.get("Pod", ns, name)
        if not isinstance(pod, Pod) or not node:
            return
        try:
            names = [n for n, _ in pod_claim_names(pod)]
        except ClaimNameError:
            names = []
        keys = tuple((ns, n) for n in names if self.objects.get("ResourceClaim", ns, n) is not None)
        if keys:
            self.prepared.setdefault(node, {})[pod.metadata.uid] = keys

    def _forget_prepared(self) -> None:
        """A pod's claims count as prepared until none is reserved for it any more, or it is gone."""
        uids = {p.metadata.uid for p in self.objects.items("Pod") if isinstance(p, Pod)}
        for pods in self.prepared.values():
            for uid, keys in list(pods.items()):
                held = any(
                    isinstance(c := self.objects.get("ResourceClaim", *k), ResourceClaim)
                    and any(r.uid == uid for r in c.status.reserved_for)
                    for k in keys
                )
                if uid not in uids or not held:
                    del pods[uid]
        self.prepared = {n: p for n, p in self.prepared.items() if p}

    def state(self) -> State:
        def by_key(kind: str) -> dict[tuple[str, str], Any]:
            objs: list[Any] = self.objects.items(kind)
            return {(o.metadata.namespace, o.metadata.name): o for o in objs}

        quotas: dict[tuple[str, str], ResourceQuota] = by_key("ResourceQuota")
        quota_used = {
            key: status_of(
                self.quota.quotas[key], self.quota.quota_usage(self.quota.quotas[key]), self.quota.index
            ).used
            for key in quotas
            if key in self.quota.quotas
        }
        return State(
            pods=by_key("Pod"),
            claims=by_key("ResourceClaim"),
            slices=[s for s in self.objects.items("ResourceSlice") if isinstance(s, ResourceSlice)],
            prepared=self.prepared,
            quotas={k: q for k, q in quotas.items() if q.status.used},  # never reconciled yet: no claim
            quota_used=quota_used,
            classic_claims=frozenset(by_key("ClassicResourceClaim")),
        )

    def _findings(self) -> list[Finding]:
        return evaluate(self.state())

    # -- bookkeeping ------------------------------------------------------------------------------
    def _compare(self, findings: Iterable[Finding], step: Step) -> None:
        now = {(f.rule.id, f.key): f for f in findings}
        for key in [k for k in self.active if k not in now]:
            self.active.pop(key).repaired_by = step
        for key, finding in now.items():
            current = self.active.get(key)
            if current is None:
                current = Breakage(finding, step, history=self._context(finding, step))
                self.active[key] = current
                self.breakages.append(current)
            current.last_seen = step

    def _still_holding(self, step: Step) -> None:
        for b in self.active.values():
            b.last_seen = step

    def _context(self, finding: Finding, step: Step) -> list[Step]:
        steps: dict[int, Step] = {}
        for kind, ns, name in finding.objects:
            for s in self._history.get((kind, ns, name), ()):
                steps[s.seq] = s
        steps[step.seq] = step
        return sorted(steps.values(), key=lambda s: s.seq)[-HISTORY:]

    # -- results ----------------------------------------------------------------------------------
    def first_violations(self) -> dict[str, Breakage]:
        """Rule id -> the first breakage that violates it."""
        out: dict[str, Breakage] = {}
        for b in self.breakages:
            if b.violates(self.grace_s):
                out.setdefault(b.finding.rule.id, b)
        return out

    def settling(self) -> list[Breakage]:
        """Breakages still holding at the end but not (yet) past the grace period."""
        return [b for b in self.active.values() if not b.violates(self.grace_s)]

    @staticmethod
    def rules() -> tuple[Rule, ...]:
        return RULES


def _decode(rec: RawRecord) -> Envelope[Event] | None:
    try:
        return decode(rec.data, rec.seq)
    except (DecodeError, msgspec.MsgspecError):
        return None


def check_records(
    records: Iterable[RawRecord | tuple[RawRecord, Envelope[Event] | None]],
    root: str,
    *,
    grace_s: float = DEFAULT_GRACE_S,
) -> LogChecker:
    """Hold every invariant against a log already read (records, or records with their envelopes)."""
    checker = LogChecker(root, grace_s=grace_s)
    for item in records:
        rec, env = item if isinstance(item, tuple) else (item, _decode(item))
        checker.feed(rec, env)
    return checker
