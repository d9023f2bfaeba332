"""``draflow get sagas [ID...] [--state S]`` and ``draflow describe saga ID``.

Both read the saga events (``<root>.ev.Saga._.<id>``) straight from JetStream (sagas are not API
objects; no apiserver needed) and fold them with ``draflow.sagas.view`` on top of ``draflow.sagas.state``, the
fold the saga engine decides with. ``--as-of-seq`` / ``--as-of-time`` work as for objects.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
from typing import Any

import msgspec

from draflow.events.subjects import aggregate_subject
from draflow.infra.eventstore import EventStore
from draflow.sagas.engine import SAGA_KIND
from draflow.sagas.state import SagaStatus
from draflow.sagas.view import SagaView, StepView, current_step, fold_view
from draflow.services.cli.asof import as_of_requested, bound_time, open_log, resolve_bound
from draflow.services.cli.common import eprint
from draflow.services.cli.main import UserError
from draflow.services.runtime import printers

__all__ = ["describe_view", "run_describe", "run_get", "saga_rows"]

_STATES = {s.value.lower(): s for s in SagaStatus}


def _time(t: datetime.datetime | None) -> str:
    if t is None:
        return "-"
    t = t.astimezone(datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _age(t: datetime.datetime) -> str:
    return printers.age(t.astimezone(datetime.UTC).isoformat())


async def _load(
    store: EventStore, args: argparse.Namespace, ids: list[str]
) -> tuple[list[SagaView], datetime.datetime | None]:
    """The sagas (all, or these ids) as of the requested point of the log, sorted by creation,
    and the time of that point (None: now), which their ages count from."""
    to_seq = await resolve_bound(store, args) if as_of_requested(args) else None
    when = await bound_time(store, args, to_seq) if to_seq is not None else None
    if to_seq == 0:
        return [], when
    subjects = [f"{store.root}.ev.{SAGA_KIND}._.*"]
    if ids:
        subjects = []
        for i in ids:
            try:
                subjects.append(aggregate_subject(SAGA_KIND, None, i, store.root))
            except ValueError:
                continue  # not a possible saga id: reported as not found
    by_subject: dict[str, list[Any]] = {}
    for subject in subjects:
        async for envs in store.read(subject, 1, to_seq):
            for env in envs:
                by_subject.setdefault(env.subject, []).append(env)
    views = [v for envs in by_subject.values() if (v := fold_view(envs)) is not None]
    return sorted(views, key=lambda v: (v.created, v.state.saga_id)), when


def _step_label(view: SagaView, step: StepView | None) -> str:
    if step is None:
        return "-"
    return f"{step.name} ({step.index + 1}/{len(view.steps)})"


def saga_rows(views: list[SagaView], headers: bool = True) -> list[list[str]]:
    rows = [["ID", "TYPE", "STATE", "STEP", "ATTEMPTS", "AGE"]] if headers else []
    for v in views:
        step = current_step(v)
        rows.append(
            [
                v.state.saga_id,
                v.state.saga_type,
                v.state.status.value,
                _step_label(v, step),
                str(step.attempts if step is not None else 0),
                _age(v.created),
            ]
        )
    return rows


def _as_dict(view: SagaView) -> dict[str, Any]:
    s = view.state
    return {
        "id": s.saga_id,
        "type": s.saga_type,
        "state": s.status.value,
        "error": s.error,
        "input": s.input,
        "outputs": s.outputs,
        "version": s.version,
        "created": _time(view.created),
        "updated": _time(view.updated),
        "steps": [msgspec.to_builtins(step) for step in view.steps],
    }


def run_get(args: argparse.Namespace) -> int:
    ids = list(args.resources[1:])
    state: SagaStatus | None = None
    if args.state is not None:
        state = _STATES.get(args.state.lower())
        if state is None:
            choices = ", ".join(s.value for s in SagaStatus)
            raise UserError(f"--state: unknown saga state {args.state!r} (one of {choices})")
    if args.watch or args.watch_only:
        raise UserError("sagas cannot be watched; use `draflow log --subject 'Saga.>' -f`")

    async def body() -> int:
        async with open_log(args) as store:
            views, when = await _load(store, args, ids)
        with printers.clock_at(when):
            return _print_views(views, ids, state, args)

    return asyncio.run(body())


def _print_views(
    views: list[SagaView], ids: list[str], state: SagaStatus | None, args: argparse.Namespace
) -> int:
    missing = [i for i in ids if i not in {v.state.saga_id for v in views}]
    for i in missing:
        eprint(f'Error from server (NotFound): sagas "{i}" not found')
    if state is not None:
        views = [v for v in views if v.state.status == state]
    if args.output == "name":
        for v in views:
            print(f"saga/{v.state.saga_id}")
    elif args.output in ("yaml", "json"):
        items = [_as_dict(v) for v in views]
        value: Any = items[0] if len(ids) == 1 and len(items) == 1 else printers.as_list(items)
        if args.output == "yaml":
            sys.stdout.write(printers.to_yaml(value))
        else:
            print(printers.to_json(value))
    elif views:
        for line in printers.format_table(saga_rows(views, not args.no_headers)):
            print(line)
    elif not ids:
        eprint("No sagas found" + (f" in state {state.value}" if state is not None else ""))
    return 1 if missing else 0


def describe_view(view: SagaView) -> str:
    s = view.state
    lines = [
        f"{'ID:':<14}{s.saga_id}",
        f"{'Type:':<14}{s.saga_type}",
        f"{'State:':<14}{s.status.value}",
    ]
    if s.error:
        lines.append(f"{'Error:':<14}{s.error}")
    lines += [
        f"{'Created:':<14}{_time(view.created)} ({_age(view.created)} ago)",
        f"{'Updated:':<14}{_time(view.updated)} ({_age(view.updated)} ago)",
        f"{'Version:':<14}{s.version} ({view.events} events)",
        f"{'Input:':<14}{json.dumps(s.input, sort_keys=True) if s.input else '<none>'}",
        "Steps:",
    ]
    rows = [["#", "Step", "State", "Attempts", "Started", "Finished", "Last Error"]]
    for st in view.steps:
        rows.append(
            [
                str(st.index + 1),
                st.name,
                st.state,
                # a local step logs no attempts: "-" once it ran, not a misleading 0
                str(st.attempts) if st.attempts or st.state == "Pending" else "-",
                _time(st.started),
                _time(st.finished),
                st.error or "-",
            ]
        )
    lines += ["  " + line for line in printers.format_table(rows, pad=2)]
    owed = [st for st in view.steps if st.index in s.started]
    if not owed:
        lines.append("Compensations:  <none>")
    else:
        lines.append("Compensations:")
        crow = [["Step", "Compensation", "State", "At"]]
        for st in sorted(owed, key=lambda x: s.started.index(x.index), reverse=True):
            if not st.compensation:
                cstate = "none registered"
            elif st.compensation_state:
                cstate = st.compensation_state
            else:
                done = s.status in (SagaStatus.RUNNING, SagaStatus.COMPLETED)
                cstate = "Registered" if done else "Owed"
            crow.append([st.name, st.compensation or "-", cstate, _time(st.compensated)])
        lines += ["  " + line for line in printers.format_table(crow, pad=2)]
    return "\n".join(line.rstrip() for line in lines)


def run_describe(args: argparse.Namespace) -> int:
    ids = list(args.resources[1:])
    if not ids:
        raise UserError("describe saga: give the saga ID (see `draflow get sagas`)")

    async def body() -> int:
        async with open_log(args) as store:
            loaded, when = await _load(store, args, ids)
        views = {v.state.saga_id: v for v in loaded}
        failed = False
        for n, i in enumerate(ids):
            view = views.get(i)
            if view is None:
                eprint(f'Error from server (NotFound): sagas "{i}" not found')
                failed = True
                continue
            if n:
                print()
            with printers.clock_at(when):
                print(describe_view(view), flush=True)
        return 1 if failed else 0

    return asyncio.run(body())
