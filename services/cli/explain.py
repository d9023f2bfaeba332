"""``draflow explain pod NAME [-n NS]``: why a pod is where it is, told from the log.

Everything comes from the event log (read straight from JetStream, no apiserver): the pod's own
events, the ``PodUnschedulable`` diagnoses the scheduler appended (nodes grouped by the plugin and
reason that rejected them, as kube-scheduler's "0/N nodes are available: ..."), the PodScheduling
and Reallocation sagas started for the pod (steps, attempts, errors, compensations, folded with
``draflow.sagas.view``), what happened to its ResourceClaims (allocated, reserved, released, deallocated,
and by which saga), the Kubernetes Events recorded about it (with their repeat counts: retries),
and a history of who (actor) did what when. ``--as-of-seq`` / ``--as-of-time`` explain the pod as
it was at that point of the log. All of it is about one pod object (one uid): a pod deleted and
created again under the same name is another pod, and the earlier ones are listed only in a
history section at the end (reading and partitioning: :mod:`draflow.services.cli.explain_log`).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
from typing import Any

import msgspec

from draflow.events.dra import (
    ClaimAllocated,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    NodeRejection,
    PodBound,
    PodUnschedulable,
)
from draflow.events.envelope import Envelope, Event
from draflow.events.objects import KubeEventRecorded
from draflow.events.subjects import decode_token
from draflow.services.cli.asof import add_as_of_args, as_of_requested, open_log, resolve_bound
from draflow.services.cli.common import add_connection_args
from draflow.services.cli.explain_log import Explanation, collect
from draflow.services.cli.explain_numeric import NUMERIC_CLAIM_EVENTS, numeric_claim_text, numeric_plan_text
from draflow.services.cli.main import UserError
from draflow.services.dra.structured.diagnosis import explain_lines
from draflow.services.runtime import printers

__all__ = ["Explanation", "collect", "register", "render"]

MAX_HISTORY = 200  # history lines printed (the newest are kept; the count of omitted ones is shown)
_CLAIM_EVENTS = (
    ClaimAllocated,
    ClaimReserved,
    ClaimReservationsReleased,
    ClaimDeallocated,
    *NUMERIC_CLAIM_EVENTS,
)


def register(sub: Any) -> None:
    p = sub.add_parser("explain", help="why a pod is where it is, from the event log")
    p.add_argument("kind", metavar="TYPE", help="pod (the only type explained so far)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("-n", "--namespace", default="default", help="the namespace (default: default)")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    add_as_of_args(p)
    add_connection_args(p)
    p.set_defaults(func=run)


def _t(t: datetime.datetime) -> str:
    t = t.astimezone(datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


# -- rendering --------------------------------------------------------------------------------------


def _status_line(ex: Explanation) -> list[str]:
    pod = ex.pod
    if pod is None:
        last = ex.pod_events[-1]
        return [f"{'Status:':<11}deleted (last event {last.type} at seq {last.seq}, {_t(last.time)})"]
    phase = pod.status.phase or "Pending"
    lines = [f"{'Status:':<11}{phase}" + (" (being deleted)" if pod.metadata.deletion_timestamp else "")]
    if pod.spec.node_name:
        lines.append(f"{'Node:':<11}{pod.spec.node_name}")
    else:
        cond = next((c for c in pod.status.conditions if c.type == "PodScheduled"), None)
        if cond is not None and cond.status == "False":
            lines.append(f"{'Why:':<11}{cond.reason}: {cond.message}")
        else:
            lines.append(f"{'Why:':<11}not scheduled yet (no scheduling attempt in the log)")
    return lines


def _which(r: NodeRejection) -> str:
    """The named nodes of a diagnosis line, and how many more it counts."""
    more = r.nodes - len(r.node_names)
    return ", ".join(r.node_names) + (f" (+{more} more)" if more > 0 else "")


def _attempts(ex: Explanation) -> list[str]:
    rows: list[tuple[int, list[str]]] = []
    for env in ex.pod_events:
        d = env.data
        if not isinstance(d, PodUnschedulable):
            continue
        head = f"seq {env.seq}  {_t(env.time)}  {env.actor or '-'}  {d.reason}"
        if d.snapshot_seq:
            head += f"  (decided on the log up to seq {d.snapshot_seq})"
        block = [head, f"    {d.message}"]
        if d.pre_filter_message:
            block.append(f"    PreFilter rejected the pod: {d.pre_filter_message}")
        if d.rejections:
            names = any(r.node_names for r in d.rejections)
            table = [["NODES", "PLUGIN", "REASON", *(["WHICH"] if names else [])]]
            table += [
                [str(r.nodes), r.plugin or "-", r.reason, *([_which(r)] if names else [])]
                for r in d.rejections
            ]
            block += ["    " + line for line in printers.format_table(table, pad=2)]
        elif d.unschedulable_plugins:
            block.append(f"    rejected by: {', '.join(d.unschedulable_plugins)}")
        elif groups := _histogram(d.message):  # written before the diagnosis was recorded
            table = [["NODES", "PLUGIN", "REASON"]] + [[str(n), "-", r] for n, r in groups]
            block += ["    " + line for line in printers.format_table(table, pad=2)]
        if d.post_filter_message:
            block.append(f"    PostFilter: {d.post_filter_message}")
        if d.requests:
            block.append("    Requests (why the nodes that could not allocate the claims had no room):")
            for line in d.requests:
                block += ["      " + text for text in explain_lines(line)]
        rows.append((env.seq, block))
    for view in ex.sagas:
        s = view.state
        if s.saga_type != "PodScheduling":
            continue
        node = s.input.get("node_name", "?")
        claims = [c.get("name", "?") for c in s.input.get("claims", [])]
        head = f"saga {s.saga_id}  {_t(view.created)}  PodScheduling -> node {node}: {s.status.value}"
        block = [head]
        if claims:
            tried = ", ".join(_allocation_text(c) for c in s.input["claims"])
            block.append(f"    allocations tried: {tried}")
        numeric = s.input.get("numeric") or []
        if numeric:
            block.append(f"    numeric claims: {', '.join(numeric_plan_text(n) for n in numeric)}")
        if s.error:
            block.append(f"    error: {s.error}")
        rows.append((ex.saga_seqs.get(s.saga_id, view.state.version), block))
    rows.sort(key=lambda r: r[0])
    out: list[str] = []
    for i, (_, block) in enumerate(rows, 1):
        out.append(f"  #{i}  {block[0]}")
        out += ["  " + line for line in block[1:]]
    return out or ["  <none>"]


def _histogram(message: str) -> list[tuple[int, str]]:
    """``0/4 nodes are available: 1 Insufficient cpu, 3 cannot allocate all claims.`` -> the groups."""
    _, sep, rest = message.partition(" nodes are available: ")
    if not sep:
        return []
    groups: list[tuple[int, str]] = []
    for part in rest.rstrip(".").split(", "):
        count, _, reason = part.partition(" ")
        if count.isdigit() and reason:
            groups.append((int(count), reason))
        elif groups:  # a reason containing ", "
            n, r = groups[-1]
            groups[-1] = (n, f"{r}, {part}")
    return groups


def _allocation_text(claim: dict[str, Any]) -> str:
    name = claim.get("name", "?")
    alloc = claim.get("allocation")
    if not alloc:
        return f"{name} (already allocated)"
    results = (alloc.get("devices") or {}).get("results") or []
    devs = [f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}" for r in results]
    return f"{name}: {', '.join(devs) or 'no devices'}"


def _sagas(ex: Explanation) -> list[str]:
    if not ex.sagas:
        return ["  <none>"]
    out: list[str] = []
    for view in ex.sagas:
        s = view.state
        out.append(f"  {s.saga_id}  {s.saga_type}  {s.status.value}  (started {_t(view.created)})")
        table = [["STEP", "STATE", "ATTEMPTS", "COMPENSATION", "ERROR"]]
        for st in view.steps:
            comp = "-"
            if st.compensation and st.compensation_state:
                comp = f"{st.compensation}: {st.compensation_state}"
            elif st.compensation and st.state != "Pending":
                comp = f"{st.compensation}: registered"
            table.append([st.name, st.state, str(st.attempts), comp, st.error or "-"])
        out += ["    " + line for line in printers.format_table(table, pad=2)]
        retried = [st for st in view.steps if st.attempts > 1]
        if retried:
            out.append("    retried: " + ", ".join(f"{st.name} x{st.attempts}" for st in retried))
    return out


def _claim_line(env: Envelope[Event], consumers: dict[str, str]) -> str:
    who = f"{env.actor or '-'}" + (f" (saga {env.correlation_id})" if env.correlation_id else "")
    return f"    seq {env.seq}  {_t(env.time)}  {_claim_what(env, consumers)}  by {who}"


def _consumers(ex: Explanation) -> dict[str, str]:
    """Consumer uid -> ``pods/NAME``, from the reservations in the log (and the pod itself)."""
    out: dict[str, str] = {}
    if ex.uid:
        out[ex.uid] = f"pods/{ex.name}"
    for envs in ex.claims.values():
        for env in envs:
            d = env.data
            c = d.consumer if isinstance(d, ClaimReserved | ClaimAllocated) else None
            if c is not None:
                out.setdefault(c.uid, f"{c.resource}/{c.name}")
    return out


def _claim_what(env: Envelope[Event], consumers: dict[str, str] | None = None) -> str:
    d = env.data
    if isinstance(d, ClaimAllocated):
        results = d.allocation.devices.results if d.allocation.devices else ()
        devs = ", ".join(f"{r.driver}/{r.pool}/{r.device}" for r in results) or "no devices"
        what = f"allocated {devs} on {d.node_name or '-'}"
        if d.consumer is not None:  # allocated and reserved in one fact (PreBind's)
            what += f", reserved for {d.consumer.resource}/{d.consumer.name}"
    elif isinstance(d, ClaimReserved):
        what = f"reserved for {d.consumer.resource}/{d.consumer.name}"
    elif isinstance(d, ClaimReservationsReleased):
        names = [(consumers or {}).get(uid, f"uid {uid}") for uid in d.uids]
        what = (
            f"reservations released ({len(d.uids)}): {', '.join(names)}"
            if names
            else "reservations released (0)"
        )
    elif isinstance(d, ClaimDeallocated):
        what = f"deallocated ({d.reason})" if d.reason else "deallocated"
        if d.released:  # the last reservations left in the same fact
            names = [(consumers or {}).get(uid, f"uid {uid}") for uid in d.released]
            what += f", reservations released ({len(names)}): {', '.join(names)}"
    elif isinstance(d, NUMERIC_CLAIM_EVENTS):
        what = numeric_claim_text(d)
    else:
        what = env.type
    return what


def _claims(ex: Explanation) -> list[str]:
    if not ex.claims:
        return ["  <none>"]
    out: list[str] = []
    consumers = _consumers(ex)
    for name, envs in sorted(ex.claims.items()):
        out.append(f"  {name}")
        lines = [_claim_line(e, consumers) for e in envs if isinstance(e.data, _CLAIM_EVENTS)]
        out += lines or ["    <not allocated>"]
    return out


def _kube_events(ex: Explanation) -> list[str]:
    if not ex.kube_events:
        return ["  <none>"]
    table = [["TYPE", "REASON", "COUNT", "LAST SEEN", "FROM", "MESSAGE"]]
    for ev in sorted(ex.kube_events.values(), key=lambda e: e.last_timestamp or e.first_timestamp or ""):
        table.append(
            [
                ev.type,
                ev.reason,
                str(max(ev.count, 1)),
                ev.last_timestamp or "-",
                ev.source.component or "-",
                ev.message,
            ]
        )
    return ["  " + line for line in printers.format_table(table, pad=2)]


def _history(ex: Explanation) -> list[str]:
    envs: list[Envelope[Event]] = [*ex.pod_events, *ex.kube_event_envs]
    for claim_envs in ex.claims.values():
        envs += claim_envs
    envs.sort(key=lambda e: e.seq)
    table = [["SEQ", "TIME", "ACTOR", "SUBJECT", "EVENT", "CORRELATION"]]
    omitted = max(0, len(envs) - MAX_HISTORY)
    for env in envs[omitted:]:
        kind, _, rest = env.subject.split(".ev.", 1)[-1].partition(".")
        obj = f"{kind}/{decode_token(rest.split('.', 1)[-1])}"
        detail = env.type
        d = env.data
        if isinstance(d, PodBound):
            detail += f" node={d.node_name}"
        elif isinstance(d, KubeEventRecorded):
            detail += f" {d.event.reason}"
        table.append([str(env.seq), _t(env.time), env.actor or "-", obj, detail, env.correlation_id or "-"])
    out = ["  " + line for line in printers.format_table(table, pad=2)]
    if omitted:
        out.insert(0, f"  ({omitted} older events omitted)")
    return out


def render(ex: Explanation) -> str:
    uid = ex.uid
    lines = [f"{'Pod:':<11}{ex.namespace}/{ex.name}" + (f" (uid {uid})" if uid else "")]
    if ex.earlier:
        n = len(ex.earlier)
        what = (
            "1 earlier pod of this name (another uid) is" if n == 1 else f"{n} earlier pods of this name are"
        )
        lines.append(
            f"{'Note:':<11}re-created: {what} listed as history at the end, not in the sections below"
        )
    lines += _status_line(ex)
    sections: list[tuple[str, list[str]]] = [
        ("Scheduling attempts:", _attempts(ex)),
        ("Sagas:", _sagas(ex)),
        ("Claims:", _claims(ex)),
        ("Events:", _kube_events(ex)),
        ("History (who did what):", _history(ex)),
    ]
    if ex.earlier:
        sections.append(
            ("Earlier incarnations (history only: deleted pods that had this name):", _earlier(ex))
        )
    for title, body in sections:
        lines.append(title)
        lines += body
    return "\n".join(line.rstrip() for line in lines)


def _earlier(ex: Explanation) -> list[str]:
    """One block per earlier pod of this name, oldest first: enough to tell it apart, no more."""
    out: list[str] = []
    for old in ex.earlier:
        last = old.last
        where = ""
        if last is not None:
            where = f", last {last.status.phase or 'Pending'}" + (
                f" on {last.spec.node_name}" if last.spec.node_name else ""
            )
        ended = f"deleted at seq {old.deleted_seq}" if old.deleted_seq else "not deleted"
        out.append(f"  uid {old.uid or '?'}  created at seq {old.first_seq}, {ended}{where}")
        unschedulable = sum(isinstance(e.data, PodUnschedulable) for e in old.pod_events)
        if unschedulable:
            out.append(f"    unschedulable: {unschedulable} time{'s' if unschedulable > 1 else ''}")
        for view in old.sagas:
            st = view.state
            out.append(
                f"    saga {st.saga_id}  {st.saga_type}  {st.status.value}  (started {_t(view.created)})"
            )
        for name, envs in sorted(old.claims.items()):
            steps = [_claim_what(e, _consumers(old)) for e in envs if isinstance(e.data, _CLAIM_EVENTS)]
            out.append(f"    claim {name}: " + ("; ".join(steps) if steps else "not allocated"))
        if old.kube_events:
            reasons = ", ".join(
                f"{ev.reason} x{max(ev.count, 1)}" if ev.count > 1 else ev.reason
                for ev in sorted(old.kube_events.values(), key=lambda e: e.last_timestamp or "")
            )
            out.append(f"    events: {reasons}")
    return out


def as_json(ex: Explanation) -> dict[str, Any]:
    attempts = [
        {"seq": e.seq, "time": _t(e.time), "actor": e.actor, **msgspec.to_builtins(e.data)}
        for e in ex.pod_events
        if isinstance(e.data, PodUnschedulable)
    ]
    sagas = [
        {
            "id": v.state.saga_id,
            "type": v.state.saga_type,
            "state": v.state.status.value,
            "input": v.state.input,
            "steps": [msgspec.to_builtins(s) for s in v.steps],
        }
        for v in ex.sagas
    ]
    out: dict[str, Any] = {
        "namespace": ex.namespace,
        "name": ex.name,
        "uid": ex.uid,
        "phase": (ex.pod.status.phase or "Pending") if ex.pod is not None else "Deleted",
        "node": ex.pod.spec.node_name if ex.pod is not None else "",
        "unschedulable": attempts,
        "sagas": sagas,
        "claims": sorted(ex.claims),
        "earlierIncarnations": [
            {
                "uid": old.uid,
                "createdSeq": old.first_seq,
                "deletedSeq": old.deleted_seq,
                "sagas": [v.state.saga_id for v in old.sagas],
                "claims": sorted(old.claims),
            }
            for old in ex.earlier
        ],
    }
    return out


def run(args: argparse.Namespace) -> int:
    if args.kind.lower() not in ("pod", "pods", "po"):
        raise UserError(f'explain: type "{args.kind}" is not supported (only pod)')

    async def body() -> int:
        async with open_log(args) as store:
            to_seq = await resolve_bound(store, args) if as_of_requested(args) else None
            ex = await collect(store, args.namespace, args.name, to_seq)
        if args.output == "json":
            print(json.dumps(as_json(ex), indent=2, sort_keys=True, default=str))
        else:
            print(render(ex), flush=True)
        return 0

    return asyncio.run(body())
