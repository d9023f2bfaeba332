"""``draflow check [--as-of-seq N | --as-of-time T] [--grace SECONDS] [-o json]``: the DRA invariants
held against the recorded log, event by event (``draflow.services.cli.checker``).

For each rule it prints ``ok`` or the first event that broke it, with what was broken, whether and
where it was repaired, and the involved objects' recent history (as ``explain`` shows it) plus the
``explain`` command to run at that point. Exit code 1 when a rule is violated.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
from typing import Any

from draflow.infra import tracing
from draflow.infra.eventstore import RawRecord
from draflow.services.cli.asof import add_as_of_args, open_log, resolve_bound
from draflow.services.cli.checker import DEFAULT_GRACE_S, Breakage, LogChecker, Step, check_records
from draflow.services.cli.common import add_connection_args
from draflow.services.cli.main import UserError
from draflow.services.runtime import printers

__all__ = ["register", "render", "report"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "check",
        help="hold the DRA invariants against the log; report the first event that broke each (exit 1)",
    )
    add_as_of_args(p)
    p.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="SECONDS",
        help="how long (log time) a settling rule may stay broken after a delete before it counts "
        f"(default {DEFAULT_GRACE_S:g})",
    )
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    add_connection_args(p)
    p.set_defaults(func=run)


def _t(t: datetime.datetime | None) -> str:
    if t is None:
        return "-"
    t = t.astimezone(datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _obj(subject: str) -> str:
    """``Kind/name`` as ``explain``'s history prints it (the namespace is the pod's)."""
    kind, _, rest = subject.partition("/")
    return f"{kind}/{rest.rsplit('/', 1)[-1]}" if rest else kind


def _explain_hint(b: Breakage) -> str:
    for kind, ns, name in b.finding.objects:
        if kind == "Pod":
            return f"draflow explain pod {name} -n {ns} --as-of-seq {b.broken_by.seq}"
    kind, ns, name = b.finding.objects[0] if b.finding.objects else ("", "", "")
    return f"draflow get {kind.lower()} {name} -n {ns} -o yaml --as-of-seq {b.broken_by.seq}" if kind else ""


def _step_line(s: Step) -> str:
    who = f" by {s.actor}" if s.actor else ""
    return f"seq {s.seq}  {_t(s.time)}  {s.type} on {_obj(s.subject)}{who}"


def render(checker: LogChecker, first: int, last: int) -> list[str]:
    violations = checker.first_violations()
    lines = [
        f"checked {len(checker.rules())} invariants after each of {checker.events} events, sequences "
        f"{first}..{last} (settling rules: grace {checker.grace_s:g}s)"
    ]
    for rule in checker.rules():
        b = violations.get(rule.id)
        if b is None:
            lines.append(f"ok        {rule.id}: {rule.text}")
            continue
        lines.append(f"VIOLATED  {rule.id}: {rule.text}")
        lines.append(f"  broken at {_step_line(b.broken_by)}")
        lines.append(f"    {b.finding.message}")
        if b.repaired_by is not None:
            lines.append(f"  repaired at {_step_line(b.repaired_by)} ({b.lasted_s():.1f}s later)")
        else:
            lines.append(f"  still broken at seq {last} ({b.lasted_s():.1f}s later)")
        table = [["SEQ", "TIME", "ACTOR", "OBJECT", "EVENT", "CORRELATION"]]
        for s in b.history:
            table.append(
                [str(s.seq), _t(s.time), s.actor or "-", _obj(s.subject), s.type, s.correlation or "-"]
            )
        lines.append("  History (the objects involved, up to the breaking event):")
        lines += ["    " + line for line in printers.format_table(table, pad=2)]
        if hint := _explain_hint(b):
            lines.append(f"  explain: {hint}")
    for b in checker.settling():
        lines.append(
            f"settling  {b.finding.rule.id}: {b.finding.message} (since seq {b.broken_by.seq}, "
            f"{b.lasted_s():.1f}s)"
        )
    bad = len(violations)
    lines.append(f"{bad} invariant(s) violated" if bad else "every invariant holds")
    return lines


def report(checker: LogChecker, first: int, last: int) -> dict[str, Any]:
    violations = checker.first_violations()
    out: dict[str, Any] = {
        "from_seq": first,
        "to_seq": last,
        "events": checker.events,
        "grace_s": checker.grace_s,
    }
    rules = []
    for rule in checker.rules():
        b = violations.get(rule.id)
        entry: dict[str, Any] = {"id": rule.id, "text": rule.text, "settles": rule.settles, "ok": b is None}
        if b is not None:
            entry["violation"] = {
                "message": b.finding.message,
                "broken_by": b.broken_by.as_dict(),
                "repaired_by": b.repaired_by.as_dict() if b.repaired_by else None,
                "lasted_s": round(b.lasted_s(), 3),
                "objects": [list(o) for o in b.finding.objects],
                "history": [s.as_dict() for s in b.history],
            }
        rules.append(entry)
    out["rules"] = rules
    out["settling"] = [
        {"rule": b.finding.rule.id, "message": b.finding.message, "since_seq": b.broken_by.seq}
        for b in checker.settling()
    ]
    out["violated"] = len(violations)
    return out


def run(args: argparse.Namespace) -> int:
    if args.grace < 0:
        raise UserError(f"--grace: must be >= 0, got {args.grace:g}")

    async def read() -> tuple[list[RawRecord], str, int]:
        async with open_log(args) as store:
            last = await store.stream_last_seq()
            if args.as_of_seq is not None or args.as_of_time is not None:
                last = await resolve_bound(store, args)
            records: list[RawRecord] = []
            if last >= 1:
                async for batch in store.read_raw(None, 1, last):
                    records.extend(batch)
            return records, store.root, last

    records, root, last = asyncio.run(read())
    with tracing.suppressed():
        checker = check_records(records, root, grace_s=args.grace)
    first = records[0].seq if records else 0
    if args.output == "json":
        print(json.dumps(report(checker, first, last), indent=2, sort_keys=True))
    else:
        print("\n".join(render(checker, first, last)))
    return 1 if checker.first_violations() else 0
