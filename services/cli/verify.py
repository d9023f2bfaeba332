"""``draflow verify-replay [--from-seq N] [--to-seq M]``: re-run today's deciders over a recorded log.

The log is read straight from JetStream and folded in order, exactly as the services fold it; at
every point where a service recorded a decision, the *current* code decides again on the state
that decision was taken on, and the two are compared. The deciders are the services' own
functions (the scheduler core and its sagas' ``assume_decided`` / ``release_decided``, the claim
controller's ``sync_pod_from``, the quota reconciler's ``fold_change`` / ``reconcile``), never a
second copy of their rules. Nothing is appended (publishing is disabled: no service object is
built, only the pure deciders run), and no spans are emitted.

Decisions checked:

* **scheduler + structured allocator** — every ``PodScheduling`` saga start (the node and every
  claim's allocation, numeric claims' too (KEP-4381: model allocation and capacity ledger
  stamp), re-decided with ``Scheduler.schedule`` on the snapshot at the saga's ``decided_at_seq``,
  with the decisions still in flight at that point in the assume cache, as the live scheduler had
  them) and every ``PodUnschedulable`` (message and diagnosis, re-decided
  at its ``snapshot_seq``). Logs written before those fields existed fall back to the position in
  the saga id and to the sequence right before the event.
* **claim controller** — every ResourceClaim generated from a template (name and spec, from the
  controller's own ``sync_pod_from`` on the state right before the claim was created).
* **quota reconciler** — every ResourceQuota status it wrote: one its own ``reconcile`` would have
  written on the log since the quota's previous event (``fold_change`` folds as it does).
* **invariants** — decisions no code may take (``draflow.services.cli.invariants``): every write to a
  bound pod (a pod is bound once: nothing changes its ``spec.nodeName``) and every released
  reservation (a running pod keeps its claims), checked on the state the event was appended to.
  A violation is reported like a difference: the rule, what it requires and what was recorded.
* **the DRA invariants** — ``draflow check``'s rules (``draflow.services.dra.invariants``) held
  against the state after every event; a violation is reported as ``draflow check`` reports it
  (after the decisions, which all matched) and the exit code is 1.
* **node lifecycle controller** — every ``NodeHeartbeatLost`` and every eviction
  (``PodDisruptionTargeted``), re-decided at the recorded position and time
  (``draflow.services.cli.verify_nodes``).

The first difference is reported (the recorded event, what it recorded, what the current code
decides) and the exit code is 1; a clean run prints how many decisions were verified and exits 0.
``--from-seq N`` still folds the log from the start but checks only decisions recorded at N or
later.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import heapq
import json
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.codec import DecodeError, decode
from draflow.events.dra import PodUnschedulable
from draflow.events.envelope import Envelope, Event
from draflow.events.saga import (
    SagaCompensated,
    SagaCompensationFailed,
    SagaCompleted,
    SagaStarted,
    SagaStepCompensated,
)
from draflow.events.subjects import parse_subject
from draflow.infra import tracing
from draflow.infra.eventstore import RawRecord
from draflow.projections.objects import ObjectIndex
from draflow.services.claim_controller import CreateClaim, sync_pod_from
from draflow.services.cli.asof import open_log
from draflow.services.cli.check import render
from draflow.services.cli.check import report as check_report
from draflow.services.cli.checker import LogChecker
from draflow.services.cli.common import add_connection_args, eprint
from draflow.services.cli.invariants import Violation, bound_pod_write, released_running_pod
from draflow.services.cli.main import UserError
from draflow.services.cli.verify_nodes import FOLDED_KINDS, check_node_decision, node_decision_position
from draflow.services.dra.quota.state import QuotaState
from draflow.services.dra.resourceclaim import POD_CLAIM_NAME_ANNOTATION, owning_pod
from draflow.services.quota_reconciler.reconcile import TRACKED, fold_change, reconcile
from draflow.services.scheduler.sagas.pod_scheduling import (
    POD_SCHEDULING,
    PodSchedulingInput,
    assume_decided,
    release_decided,
)

__all__ = ["Divergence", "Verifier", "register", "verify_records"]

_SAGA_POSITION = re.compile(r"-(\d+)(?:-\d+)?$")
_CLAIM_KINDS = frozenset({"Pod", "ResourceClaim", "ResourceClaimTemplate"})
_FOLDED_KINDS = _CLAIM_KINDS | TRACKED | FOLDED_KINDS
DEFAULT_WINDOW = 20_000  # records the fold may lag the reading (a decision's lag must fit)
_QUOTA_STATUS = "ResourceQuotaStatusUpdated"
DEFAULT_INSTANCE = "scheduler"  # DRAFLOW_SCHEDULER_ID's default


def register(sub: Any) -> None:
    p = sub.add_parser(
        "verify-replay",
        help="re-run the current deciders over the recorded log; report the first decision that differs",
    )
    p.add_argument(
        "--from-seq", type=int, default=1, metavar="N", help="check decisions recorded at N or later"
    )
    p.add_argument(
        "--to-seq", type=int, default=None, metavar="M", help="stop at sequence M (default: the end)"
    )
    p.add_argument(
        "--window",
        type=int,
        default=DEFAULT_WINDOW,
        metavar="N",
        help=f"events the fold may lag the reading: a decision's lag must fit (default {DEFAULT_WINDOW})",
    )
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    add_connection_args(p)
    p.set_defaults(func=run)


@dataclass(frozen=True)
class Divergence:
    seq: int
    event: str  # what was recorded, e.g. "PodScheduling saga scheduler-ps-...-13"
    subject: str
    expected: Any  # the recorded decision
    actual: Any  # what the current code decides
    decided_at: int = 0  # the log position both decisions were taken on
    rule: str = ""  # an invariant broken: ``expected`` is what it requires, ``actual`` what was recorded

    def as_dict(self) -> dict[str, Any]:
        out = {
            "seq": self.seq,
            "event": self.event,
            "subject": self.subject,
            "decided_at_seq": self.decided_at,
            "expected": self.expected,
            "actual": self.actual,
        }
        if self.rule:
            out["rule"] = self.rule
        return out


@dataclass(order=True)
class _Decision:
    position: int  # re-decide on the log up to here
    seq: int  # where the decision is recorded
    kind: str = field(compare=False)  # "schedule", "unschedulable", "claim"
    env: Envelope[Event] = field(compare=False)
    namespace: str = field(compare=False, default="")
    name: str = field(compare=False, default="")
    uid: str = field(compare=False, default="")
    instance: str = field(compare=False, default="")  # the scheduler instance that decided
    plan: PodSchedulingInput | None = field(compare=False, default=None)  # a PodScheduling decision


def _builtins(x: Any) -> Any:
    """JSON-shaped (lists, not tuples), so a decision compares equal to its recorded form."""
    return msgspec.json.decode(msgspec.json.encode(x))


def _schedule_view(inp: dict[str, Any]) -> dict[str, Any]:
    """The parts of a PodScheduling decision that are decided: node and per-claim allocation."""
    return _builtins(
        {
            "node": inp.get("node_name", ""),
            "claims": {c.get("name", ""): c.get("allocation") for c in inp.get("claims", [])},
            # KEP-4381 numeric claims: their allocation and the ledger stamp the decision saw
            "numeric": {
                n.get("name", ""): [n.get("allocation"), n.get("ledger")] for n in inp.get("numeric", [])
            },
        }
    )


def _unschedulable_view(ev: PodUnschedulable, detailed: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"reason": ev.reason, "message": ev.message}
    if detailed:  # written by a scheduler that records the diagnosis: compare it too
        out["rejections"] = _builtins(ev.rejections)
        out["unschedulable_plugins"] = list(ev.unschedulable_plugins)
        out["pre_filter_message"] = ev.pre_filter_message
        out["post_filter_message"] = ev.post_filter_message
    return out


class Verifier:
    """Folds a log and re-decides every recorded decision; pure (no I/O)."""

    def __init__(self, root: str, *, from_seq: int = 1) -> None:
        from draflow.services.scheduler.framework import Scheduler
        from draflow.services.scheduler.plugins import default_plugins
        from draflow.services.scheduler.service.snapshot import Snapshot

        self.root = root
        self.from_seq = from_seq
        self._new_core = lambda: Scheduler(plugins=default_plugins(), clock=lambda: 0.0)
        self._snapshot_of = Snapshot
        # one scheduling core per scheduler instance: each had its own assume cache (its decisions in
        # flight); every core folds the whole log. Created in run() once the instances are known.
        self.snapshots: dict[str, Snapshot] = {}
        self.objects = ObjectIndex()  # the claim controller's kinds, folded in log order
        self.checked: dict[str, int] = {"schedule": 0, "unschedulable": 0, "claim": 0, "quota": 0, "node": 0}
        self.invariants = 0  # events checked against draflow.services.cli.invariants
        self._violation: Divergence | None = None  # the first one found while folding
        self.quota = QuotaState()  # folded as the quota reconciler folds it
        # quota (namespace, name) -> every status the reconciler could have written since the quota's
        # last event (it decides on a snapshot that may lag the log a little)
        self._quota_candidates: dict[tuple[str, str], list[Any]] = {}
        # PodScheduling saga id -> (scheduler instance, its decision)
        self._saga_plans: dict[str, tuple[str, PodSchedulingInput]] = {}

    # -- which records are decisions ------------------------------------------------------------------
    def decisions(self, records: list[tuple[RawRecord, Envelope[Event] | None]]) -> list[_Decision]:
        out: list[_Decision] = []
        for rec, env in records:
            if env is None:
                continue
            d = env.data
            if isinstance(d, SagaStarted) and d.saga_type == POD_SCHEDULING:
                saga_id = rec.subject.rsplit(".", 1)[-1]
                position = d.decided_at_seq
                if not position and (m := _SAGA_POSITION.search(saga_id)):
                    position = int(m.group(1))
                inp = d.input
                instance = saga_id.split("-ps-", 1)[0] if "-ps-" in saga_id else DEFAULT_INSTANCE
                out.append(
                    _Decision(
                        position or rec.seq - 1,
                        rec.seq,
                        "schedule",
                        env,
                        str(inp.get("namespace", "")),
                        str(inp.get("name", "")),
                        str(inp.get("uid", "")),
                        instance,
                        msgspec.convert(inp, PodSchedulingInput),
                    )
                )
            elif isinstance(d, PodUnschedulable):
                ns, name = self._ns_name(rec.subject)
                position = d.snapshot_seq or rec.seq - 1
                instance = d.instance or DEFAULT_INSTANCE
                out.append(_Decision(position, rec.seq, "unschedulable", env, ns, name, instance=instance))
            elif (node_position := node_decision_position(env, rec.seq)) is not None:
                ns, name = self._ns_name(rec.subject)
                out.append(_Decision(node_position, rec.seq, "node", env, ns, name))
            elif env.type == "ResourceClaimApplied":
                claim = getattr(d, "object", None)
                if isinstance(claim, ResourceClaim) and _generated(claim):
                    meta = claim.metadata
                    out.append(_Decision(rec.seq - 1, rec.seq, "claim", env, meta.namespace, meta.name))
        return sorted(out)

    def _ns_name(self, subject: str) -> tuple[str, str]:
        ref = parse_subject(subject, self.root)
        return ref.namespace or "", ref.name

    # -- folding ---------------------------------------------------------------------------------------
    def apply(self, rec: RawRecord, env: Envelope[Event] | None) -> None:
        for snapshot in self.snapshots.values():
            snapshot.apply_records([rec])
        if env is None:
            return
        try:
            ref = parse_subject(rec.subject, self.root)
        except ValueError:
            ref = None
        if ref is not None and ref.kind in _FOLDED_KINDS:
            kind, ns, name = ref.kind, ref.namespace or "", ref.name
            before = self.objects.get(kind, ns, name) if kind in ("Pod", "ResourceClaim") else None
            change = self.objects.apply_envelope(kind, ns, name, env)
            if before is not None and rec.seq >= self.from_seq and self._violation is None:
                self._check_invariants(rec, env, kind, ns, name, before)
            if change is not None and kind in TRACKED:
                fold_change(self.quota, kind, ns, name, change)
                self._quota_moved(
                    None if kind == "DeviceClass" else ns, (ns, name) if kind == "ResourceQuota" else None
                )
        d = env.data
        if isinstance(d, SagaStepCompensated) and d.step == "reserve":
            # the live scheduler's unreserve dropped the assumed decision right before recording this
            decided = self._saga_plans.pop(rec.subject.rsplit(".", 1)[-1], None)
            if decided is not None:
                instance, plan = decided
                release_decided(self.snapshots[instance], plan)
        elif isinstance(d, SagaCompleted | SagaCompensated | SagaCompensationFailed):
            self._saga_plans.pop(rec.subject.rsplit(".", 1)[-1], None)  # it can release nothing now

    def _check_invariants(
        self, rec: RawRecord, env: Envelope[Event], kind: str, ns: str, name: str, before: Any
    ) -> None:
        found: Violation | None = None
        d = env.data
        if kind == "Pod" and isinstance(before, Pod) and before.spec.node_name:
            self.invariants += 1
            after = self.objects.get("Pod", ns, name)
            node = getattr(d, "node_name", "") if env.type == "PodBound" else ""
            found = bound_pod_write(before, after if isinstance(after, Pod) else None, env.type, node)
        elif (
            kind == "ResourceClaim"
            and isinstance(before, ResourceClaim)
            and env.type in ("ClaimReservationsReleased", "ClaimDeallocated")
            and (released := tuple(getattr(d, "uids", ()) or getattr(d, "released", ())))
        ):
            self.invariants += 1
            pods = {
                ref.name: pod
                for ref in before.status.reserved_for
                if isinstance(pod := self.objects.get("Pod", ns, ref.name), Pod)
            }
            found = released_running_pod(before, released, pods)
        if found is not None:
            who = f" by {env.actor}" if env.actor else ""
            self._violation = Divergence(
                rec.seq,
                f"{env.type} on {kind} {ns}/{name}{who}",
                rec.subject,
                found.expected,
                found.actual,
                rec.seq - 1,
                rule=found.rule,
            )

    def _quota_moved(self, namespace: str | None, reset: tuple[str, str] | None) -> None:
        """Record the status each quota of ``namespace`` (None: all) would get now: what the
        reconciler's ``reconcile`` would write, or the status it has when it would write nothing."""
        if reset is not None:
            self._quota_candidates.pop(reset, None)
        written = reconcile(self.quota, namespace)
        statuses = {(q.metadata.namespace, q.metadata.name): q.status for q in written}
        for key, quota in self.quota.quotas.items():
            if namespace is not None and key[0] != namespace:
                continue
            status = _builtins(statuses.get(key, quota.status))
            seen = self._quota_candidates.setdefault(key, [])
            if not seen or seen[-1] != status:
                seen.append(status)

    def check_quota(self, rec: RawRecord, env: Envelope[Event]) -> Divergence | None:
        """A ResourceQuota status the reconciler wrote: one the current code would have written
        on the log between the quota's previous event and this one."""
        ns, name = self._ns_name(rec.subject)
        recorded = _builtins(getattr(env.data, "status", None))
        seen = self._quota_candidates.get((ns, name), [])
        self.checked["quota"] += 1
        if recorded in seen:
            return None
        return Divergence(
            rec.seq,
            f"ResourceQuota {ns}/{name} status",
            rec.subject,
            {"status": recorded},
            {"status": seen[-1] if seen else None, "candidates": len(seen)},
            rec.seq - 1,
        )

    # -- re-deciding -----------------------------------------------------------------------------------
    def check(self, dec: _Decision) -> Divergence | None:
        checker: dict[str, Callable[[_Decision], Divergence | None]] = {
            "schedule": self._check_schedule,
            "unschedulable": self._check_unschedulable,
            "claim": self._check_claim,
            "node": self._check_node,
        }
        return checker[dec.kind](dec)

    def _snapshot(self, dec: _Decision) -> Any:
        return self.snapshots.get(dec.instance) or next(iter(self.snapshots.values()))

    def _pod(self, dec: _Decision) -> Pod | None:
        pod, _ = self._snapshot(dec).get("Pod", dec.namespace, dec.name)
        if not isinstance(pod, Pod) or (dec.uid and pod.metadata.uid != dec.uid):
            return None
        return pod

    def _decide(self, dec: _Decision) -> dict[str, Any]:
        from draflow.services.scheduler.framework import Reserved, SchedulingError, Unschedulable
        from draflow.services.scheduler.service.runner import diagnosis_event

        pod = self._pod(dec)
        if pod is None:
            return {"error": "the pod is not in the log at that position"}
        result = self._snapshot(dec).core.schedule(pod)
        if isinstance(result, Reserved):
            return {"scheduled": _schedule_view(msgspec.to_builtins(PodSchedulingInput.of(result)))}
        assert isinstance(result, Unschedulable | SchedulingError)
        return {"unschedulable": _unschedulable_view(diagnosis_event(result), True)}

    def _check_schedule(self, dec: _Decision) -> Divergence | None:
        d = dec.env.data
        assert isinstance(d, SagaStarted)
        expected = {"scheduled": _schedule_view(d.input)}
        actual = self._decide(dec)
        if actual == expected:
            return None
        saga_id = dec.env.subject.rsplit(".", 1)[-1]
        return Divergence(
            dec.seq,
            f"PodScheduling saga {saga_id} for pod {dec.namespace}/{dec.name}",
            dec.env.subject,
            expected,
            actual,
            dec.position,
        )

    def _check_unschedulable(self, dec: _Decision) -> Divergence | None:
        d = dec.env.data
        assert isinstance(d, PodUnschedulable)
        detailed = bool(d.snapshot_seq)
        expected = {"unschedulable": _unschedulable_view(d, detailed)}
        actual = self._decide(dec)
        if "unschedulable" in actual and not detailed:
            actual["unschedulable"] = {k: actual["unschedulable"][k] for k in ("reason", "message")}
        elif "rejections" in actual.get("unschedulable", {}) and not any(
            r.node_names for r in d.rejections
        ):  # recorded before node names were kept: compare the rest
            for r in actual["unschedulable"]["rejections"]:
                r.pop("node_names", None)
        if actual == expected:
            return None
        return Divergence(
            dec.seq,
            f"PodUnschedulable for pod {dec.namespace}/{dec.name}",
            dec.env.subject,
            expected,
            actual,
            dec.position,
        )

    def _check_claim(self, dec: _Decision) -> Divergence | None:
        d = dec.env.data
        claim = getattr(d, "object", None)
        assert isinstance(claim, ResourceClaim)
        owner = next(r for r in claim.metadata.owner_references if r.kind == "Pod")
        expected = {"name": claim.metadata.name, "spec": _builtins(claim.spec)}
        pod = self.objects.get("Pod", dec.namespace, owner.name)
        actual: dict[str, Any]
        if not isinstance(pod, Pod) or pod.metadata.uid != owner.uid:
            actual = {"error": f"owner pod {owner.name} (uid {owner.uid}) is not in the log at that position"}
        else:
            claims = [
                c for c in self.objects.items("ResourceClaim", dec.namespace) if isinstance(c, ResourceClaim)
            ]
            owned = {c.metadata.name for c in claims if (o := owning_pod(c)) and o.uid == owner.uid}
            taken = {c.metadata.name for c in claims}
            pod_claim = claim.metadata.annotations.get(POD_CLAIM_NAME_ANNOTATION, "")
            creates = [
                a
                for a in sync_pod_from(pod, self.objects.get, owned, taken)
                if isinstance(a, CreateClaim) and a.pod_claim_name == pod_claim
            ]
            if not creates:
                actual = {"error": "the claim controller would not create this claim"}
            else:
                actual = {"name": creates[0].name, "spec": _builtins(creates[0].claim.spec)}
        if actual == expected:
            return None
        return Divergence(
            dec.seq,
            f"ResourceClaim {dec.namespace}/{dec.name} created for pod {owner.name}",
            dec.env.subject,
            expected,
            actual,
            dec.position,
        )

    def _check_node(self, dec: _Decision) -> Divergence | None:
        found = check_node_decision(self.objects, dec.env, dec.namespace, dec.name)
        if found is None:
            return None
        what, expected, actual = found
        return Divergence(dec.seq, what, dec.env.subject, expected, actual, dec.position)

    def _assume_recorded(self, dec: _Decision) -> None:
        """Put a recorded PodScheduling decision in the assume cache (what its saga's reserve does)."""
        pod = self._pod(dec)
        if pod is not None and dec.plan is not None:
            assume_decided(self._snapshot(dec), pod, dec.plan)

    # -- driving -----------------------------------------------------------------------------------------
    def run(self, records: list[tuple[RawRecord, Envelope[Event] | None]]) -> Divergence | None:
        """Verify a log already read (tests): :meth:`run_stream` with every record at hand."""
        return self.run_stream(records, instances_of(self, records), window=len(records) + 1)

    def run_stream(
        self,
        records: Iterable[tuple[RawRecord, Envelope[Event] | None]],
        instances: list[str],
        *,
        window: int = DEFAULT_WINDOW,
    ) -> Divergence | None:
        """Fold the records in order and re-decide each decision on the log up to its position
        (:class:`Replay`, fed one record at a time)."""
        replay = Replay(self, instances, window)
        for rec, env in records:
            if (found := replay.feed(rec, env)) is not None:
                return found
        return replay.finish()


class Replay:
    """A verification fed one record at a time, in log order.

    A decision is recorded a little after the position it was decided at (a scheduler's view
    lags the log), so the fold runs up to ``window`` records behind the reading: memory holds the
    window and the folded live state, never the whole log. A decision recorded more than
    ``window`` records after its position is reported as such (a larger window checks it)."""

    def __init__(self, verifier: Verifier, instances: list[str], window: int = DEFAULT_WINDOW) -> None:
        self.v = verifier
        self.window = window
        for instance in instances or [DEFAULT_INSTANCE]:
            # its fold only: Snapshot reads nothing but the store's root until start() (never called)
            snapshot = verifier._snapshot_of(_RootOnly(verifier.root), verifier._new_core())  # type: ignore[arg-type]
            verifier.snapshots[instance] = snapshot
        self._buffer: collections.deque[tuple[RawRecord, Envelope[Event] | None]] = collections.deque()
        self._pending: list[_Decision] = []  # a heap: the next decision to check first
        self.folded = 0

    def feed(self, rec: RawRecord, env: Envelope[Event] | None) -> Divergence | None:
        v = self.v
        self._buffer.append((rec, env))
        for dec in v.decisions([(rec, env)]):
            if dec.position < self.folded and dec.seq >= v.from_seq:  # one not checked goes on
                return _too_late(dec, self.folded, self.window)
            if dec.plan is not None:
                v._saga_plans[dec.env.subject.rsplit(".", 1)[-1]] = (dec.instance, dec.plan)
            heapq.heappush(self._pending, dec)
        if len(self._buffer) > self.window:
            return self._drain(self._buffer[0][0].seq)
        return None

    def finish(self) -> Divergence | None:
        return self._drain(sys.maxsize)

    def _drain(self, to: int) -> Divergence | None:
        """Fold up to ``to``, checking every pending decision at its position on the way."""
        v, buffer, pending = self.v, self._buffer, self._pending
        while True:
            nxt = pending[0] if pending and pending[0].position <= to else None
            target = nxt.position if nxt is not None else to
            while buffer and buffer[0][0].seq <= target:
                rec, env = buffer.popleft()
                if env is not None and env.type == _QUOTA_STATUS and rec.seq >= v.from_seq:
                    if (found := v.check_quota(rec, env)) is not None:
                        return found
                v.apply(rec, env)
                self.folded = rec.seq
                if v._violation is not None:
                    return v._violation
            if nxt is None:
                return None
            dec = heapq.heappop(pending)
            if dec.seq < v.from_seq:
                if dec.kind == "schedule":  # not checked, but in flight from now on as it was live
                    v._assume_recorded(dec)
                continue
            v.checked[dec.kind] += 1
            if (found := v.check(dec)) is not None:
                return found


def _too_late(dec: _Decision, folded: int, window: int) -> Divergence:
    return Divergence(
        dec.seq,
        f"{dec.kind} decision recorded at {dec.seq}, decided on the log up to {dec.position}",
        dec.env.subject,
        {"window": f"at most {window} events between a decision and its position"},
        {"lag": dec.seq - dec.position, "folded": folded, "hint": "rerun with a larger --window"},
        dec.position,
    )


def instances_of(
    verifier: Verifier, records: Iterable[tuple[RawRecord, Envelope[Event] | None]]
) -> list[str]:
    """The scheduler instances whose decisions the log records (each gets its own fold)."""
    found: set[str] = set()
    for rec, env in records:
        for dec in verifier.decisions([(rec, env)]):
            if dec.kind in ("schedule", "unschedulable"):
                found.add(dec.instance)
    return sorted(found)


class _RootOnly:
    """What ``Snapshot``'s fold needs of an event store: its subject root (no connection)."""

    def __init__(self, root: str) -> None:
        self.root = root


def _generated(claim: ResourceClaim) -> bool:
    meta = claim.metadata
    owned = any(r.kind == "Pod" for r in meta.owner_references)
    return bool(meta.generate_name) and POD_CLAIM_NAME_ANNOTATION in meta.annotations and owned


def _decode(rec: RawRecord) -> Envelope[Event] | None:
    try:
        return decode(rec.data, rec.seq)
    except (DecodeError, msgspec.MsgspecError):
        return None


def verify_records(
    records: list[RawRecord], root: str, from_seq: int = 1
) -> tuple[Verifier, Divergence | None]:
    """Verify a log already read (tests and the command)."""
    verifier = Verifier(root, from_seq=from_seq)
    with tracing.suppressed():
        return verifier, verifier.run([(r, _decode(r)) for r in records])


def _decision_like(rec: RawRecord) -> bool:
    """Cheaply: could this record name a scheduler instance (a saga start, PodUnschedulable)?"""
    return b"SagaStarted" in rec.data or b"PodUnschedulable" in rec.data


def _short(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def run(args: argparse.Namespace) -> int:
    if args.from_seq < 1:
        raise UserError(f"--from-seq: must be >= 1, got {args.from_seq}")

    async def replay() -> tuple[Verifier, Divergence | None, LogChecker, int, int]:
        """Two reads of the log, each streamed: the scheduler instances it records (each gets its
        own fold), then the verification and draflow check's rules, side by side."""
        async with open_log(args) as store:
            last = await store.stream_last_seq()
            to_seq = last if args.to_seq is None else args.to_seq
            if to_seq > last or to_seq < 1:
                raise UserError(f"--to-seq: {args.to_seq} is outside the log (sequences 1..{last})")
            verifier = Verifier(store.root, from_seq=args.from_seq)
            instances: set[str] = set()
            async for batch in store.read_raw(None, 1, to_seq):
                instances.update(
                    instances_of(verifier, [(r, _decode(r)) for r in batch if _decision_like(r)])
                )
            replay = Replay(verifier, sorted(instances), args.window)
            checker = LogChecker(store.root)
            divergence: Divergence | None = None
            first = 0
            with tracing.suppressed():
                async for batch in store.read_raw(None, 1, to_seq):
                    first = first or batch[0].seq
                    for rec in batch:
                        env = _decode(rec)
                        checker.feed(rec, env)
                        if divergence is None:
                            divergence = replay.feed(rec, env)
                if divergence is None:
                    divergence = replay.finish()
            return verifier, divergence, checker, first, to_seq

    verifier, divergence, checker, first, to_seq = asyncio.run(replay())
    violated = checker.first_violations()
    checked = verifier.checked
    total = sum(checked.values())
    node_part = f", {checked['node']} node lifecycle" if checked["node"] else ""
    summary = (
        f"{total} decisions ({checked['schedule']} PodScheduling, {checked['unschedulable']} "
        f"PodUnschedulable, {checked['claim']} claims from templates, {checked['quota']} quota statuses"
        f"{node_part}) and {verifier.invariants} invariant checks, sequences {args.from_seq}..{to_seq}"
    )
    if args.output == "json":
        out = {
            "checked": checked,
            "invariants_checked": verifier.invariants,
            "to_seq": to_seq,
            "divergence": divergence.as_dict() if divergence else None,
            "check": check_report(checker, first, to_seq),
        }
        print(json.dumps(out, indent=2, sort_keys=True, default=str))
        return 1 if divergence or violated else 0
    if divergence is None:
        print(f"verified {summary}: every decision matches the log")
        if not violated:
            print(
                f"checked {len(checker.rules())} invariants after each of {checker.events} events: "
                "every invariant holds"
            )
            return 0
        print("\n".join(render(checker, first, to_seq)[1:]))
        eprint(f"verify-replay: the log breaks {len(violated)} invariant(s) (draflow check)")
        sys.stdout.flush()
        return 1
    print(f"DIVERGED at seq {divergence.seq}: {divergence.event}")
    print(f"  subject:   {divergence.subject}")
    print(f"  decided on the log up to seq {divergence.decided_at}")
    if divergence.rule:
        print(f"  rule broken: {divergence.rule}")
        print(f"  expected (the rule): {_short(divergence.expected)}")
        print(f"  actual (recorded): {_short(divergence.actual)}")
        eprint(f"verify-replay: a recorded decision breaks an invariant ({summary} checked before it)")
        sys.stdout.flush()
        return 1
    print(f"  expected (recorded): {_short(divergence.expected)}")
    print(f"  actual (current code): {_short(divergence.actual)}")
    eprint(f"verify-replay: the current code decides differently ({summary} checked before the difference)")
    sys.stdout.flush()
    return 1
