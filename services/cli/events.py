"""``draflow events [-n NS | -A] [--for TYPE/NAME] [--types Warning] [-w]``: Kubernetes Events.

The table of ``kubectl events``: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE (oldest first), with
a NAMESPACE column for ``-A``; ``-w`` keeps printing new and repeated events.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from events.api.codec import encode_object
from services.cli.common import add_connection_args, add_namespace_args, eprint, resolve_type, run_client
from services.cli.main import UserError
from services.runtime import printers
from services.runtime.client import ApiClient
from services.runtime.selectors import parse_field_selector

__all__ = ["register", "run"]

Obj = dict[str, Any]
HEADERS = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]


def register(sub: Any) -> None:
    p = sub.add_parser("events", help="list Kubernetes Events (kubectl events)")
    add_namespace_args(p)
    p.add_argument("--for", dest="for_object", metavar="TYPE/NAME", help="only events about this object")
    p.add_argument("--types", default="", help="comma-separated event types to show (Normal,Warning)")
    p.add_argument("-w", "--watch", action="store_true", help="after listing, print events as they come")
    p.add_argument("-o", "--output", choices=("yaml", "json"), help="output format")
    p.add_argument("--no-headers", action="store_true", help="table without the header line")
    add_connection_args(p)
    p.set_defaults(func=run)


def _row(ev: Obj, all_ns: bool) -> list[str]:
    involved = ev.get("involvedObject") or {}
    cells = [
        printers.event_last_seen(ev),
        str(ev.get("type", "")),
        str(ev.get("reason", "")),
        f"{involved.get('kind', '')}/{involved.get('name', '')}",
        str(ev.get("message", "")),
    ]
    return [str((ev.get("metadata") or {}).get("namespace", "")), *cells] if all_ns else cells


def _selector(args: argparse.Namespace) -> str:
    if not args.for_object:
        return ""
    kind, sep, name = args.for_object.partition("/")
    if not sep or not name:
        raise UserError(f"--for must be TYPE/NAME, got {args.for_object!r}")
    return f"involvedObject.kind={resolve_type(kind).kind},involvedObject.name={name}"


def _wanted(args: argparse.Namespace) -> set[str]:
    types = {t.strip() for t in args.types.split(",") if t.strip()}
    for t in types:
        if t not in ("Normal", "Warning"):
            raise UserError(f"valid --types are Normal or Warning, got {t!r}")
    return types


def run(args: argparse.Namespace) -> int:
    selector = _selector(args)
    types = _wanted(args)
    namespace = None if args.all_namespaces else (args.namespace or "default")

    async def body(client: ApiClient) -> int:
        items, _ = await client.list("Event", namespace=namespace, field_selector=selector)
        items = [e for e in items if not types or e.get("type") in types]
        items.sort(key=printers.event_order)
        if args.output:
            value = printers.as_list(items)
            sys.stdout.write(
                printers.to_yaml(value) if args.output == "yaml" else printers.to_json(value) + "\n"
            )
        elif items:
            rows = [] if args.no_headers else [(["NAMESPACE"] if args.all_namespaces else []) + HEADERS]
            rows += [_row(e, args.all_namespaces) for e in items]
            for line in printers.format_table(rows):
                print(line)
        elif not args.watch:
            where = "" if args.all_namespaces else f" in {namespace} namespace"
            eprint(f"No events found{where}.")
        sys.stdout.flush()
        if args.watch:
            _, matches = parse_field_selector(selector)
            async for change in client.watch("Event", namespace=namespace, initial=False):
                ev = encode_object(change.object)
                if change.type == "DELETED" or not matches(ev) or (types and ev.get("type") not in types):
                    continue
                print("   ".join(_row(ev, args.all_namespaces)), flush=True)
        return 0

    return run_client(args, body)
