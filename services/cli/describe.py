"""``draflow describe TYPE [NAME...]``: an object in kubectl's generic describe layout, plus Events.

Name, Namespace, Labels, Annotations, API Version and Kind come first; then the rest of the
object (metadata, spec, status with its conditions) with keys written as words ("Device Class
Name"); then the Kubernetes Events about the object with their ages (``5s``, ``2m (x3 over 10m)``).
``describe saga ID`` shows a saga's steps and compensations instead (``draflow.services.cli.sagas``).
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from draflow.services.cli.common import (
    ResourceInfo,
    add_connection_args,
    add_namespace_args,
    discovering,
    eprint,
    run_client,
    saga_resources,
    server_error,
)
from draflow.services.cli.get import parse_targets
from draflow.services.runtime import printers
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import StatusError

__all__ = ["describe_object", "event_lines", "register", "run"]

Obj = dict[str, Any]
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_UPPER = {"uid": "UID", "api": "API", "ip": "IP", "ips": "IPs", "id": "ID", "cidr": "CIDR", "cel": "CEL"}
_SHOWN_FIRST = ("name", "namespace", "labels", "annotations")


def register(sub: Any) -> None:
    p = sub.add_parser("describe", help="show an object in detail with its Events (kubectl describe)")
    p.add_argument("resources", nargs="+", metavar="TYPE [NAME...] | TYPE/NAME")
    add_namespace_args(p)
    p.add_argument("-l", "--selector", default="", help="label selector")
    add_connection_args(p)
    p.set_defaults(func=run)


def title(key: str) -> str:
    """``deviceClassName`` -> ``Device Class Name`` (kubectl's generic describer)."""
    words = _WORD.findall(key) or [key]
    return " ".join(_UPPER.get(w.lower(), w[:1].upper() + w[1:]) for w in words)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _render(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        width = max((len(title(k)) for k, v in value.items() if not isinstance(v, dict | list)), default=0)
        for key, item in sorted(value.items()):
            label = title(key) + ":"
            if isinstance(item, dict | list):
                lines.append(f"{pad}{label}")
                lines.extend(_render(item, indent + 2))
            else:
                lines.append(f"{pad}{label.ljust(width + 1)}  {_scalar(item)}".rstrip())
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict | list):
                lines.extend(_render(item, indent))
            else:
                lines.append(f"{pad}{_scalar(item)}")
    else:
        lines.append(f"{pad}{_scalar(value)}")
    return lines


def _pairs(label: str, values: dict[str, str], sep: str) -> list[str]:
    head = f"{label}:".ljust(14)
    if not values:
        return [f"{head}<none>"]
    items = [f"{k}{sep}{v}" for k, v in sorted(values.items())]
    return [f"{head}{items[0]}"] + [" " * 14 + i for i in items[1:]]


def event_lines(events: list[Obj]) -> list[str]:
    if not events:
        return ["Events:  <none>"]
    rows = [["Type", "Reason", "Age", "From", "Message"], ["----", "------", "----", "----", "-------"]]
    for ev in sorted(events, key=printers.event_order):
        count = int(ev.get("count") or 1)
        seen = printers.event_last_seen(ev)
        shown_age = f"{seen} (x{count} over {printers.age(ev.get('firstTimestamp'))})" if count > 1 else seen
        # kubectl describe's From: the source component, else the reporting controller; the
        # reporting instance is in ``get events -o yaml`` (reportingInstance)
        src = ev.get("source") or {}
        source = str(src.get("component") or ev.get("reportingComponent") or "")
        rows.append(
            [
                str(ev.get("type", "")),
                str(ev.get("reason", "")),
                shown_age,
                source,
                str(ev.get("message", "")),
            ]
        )
    return ["Events:"] + ["  " + line for line in printers.format_table(rows, pad=2)]


def describe_object(obj: Obj, events: list[Obj]) -> str:
    obj = printers.as_shown(obj)
    meta: dict[str, Any] = obj.get("metadata") or {}
    lines = [f"{'Name:'.ljust(14)}{meta.get('name', '')}"]
    if meta.get("namespace"):
        lines.append(f"{'Namespace:'.ljust(14)}{meta['namespace']}")
    lines += _pairs("Labels", meta.get("labels") or {}, "=")
    lines += _pairs("Annotations", meta.get("annotations") or {}, ": ")
    lines.append(f"{'API Version:'.ljust(14)}{obj.get('apiVersion', '')}")
    lines.append(f"{'Kind:'.ljust(14)}{obj.get('kind', '')}")
    rest_meta = {k: v for k, v in meta.items() if k not in _SHOWN_FIRST}
    if rest_meta:
        lines.append("Metadata:")
        lines += _render(rest_meta, 2)
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata"):
            continue
        if isinstance(value, dict | list):
            lines.append(f"{title(key)}:")
            lines += _render(value, 2)
        else:
            lines.append(f"{title(key) + ':':<14}{_scalar(value)}")
    lines += event_lines(events)
    return "\n".join(lines)


async def _events_for(client: ApiClient, info: ResourceInfo, obj: Obj) -> list[Obj]:
    meta = obj.get("metadata") or {}
    selector = f"involvedObject.kind={info.kind},involvedObject.name={meta.get('name', '')}"
    if meta.get("uid"):
        selector += f",involvedObject.uid={meta['uid']}"
    items, _ = await client.list(
        "Event", namespace=meta.get("namespace") or "default", field_selector=selector
    )
    return items


def run(args: argparse.Namespace) -> int:
    if (sagas := saga_resources(args.resources)) is not None:
        from draflow.services.cli.sagas import run_describe

        args.resources = sagas
        return run_describe(args)
    targets = discovering(args, lambda: parse_targets(args.resources))

    async def body(client: ApiClient) -> int:
        failed, printed = False, 0
        for info, names in targets:
            ns = (
                ""
                if not info.namespaced
                else (None if args.all_namespaces else (args.namespace or "default"))
            )
            objs: list[Obj] = []
            if names:
                for name in names:
                    try:
                        objs.append(await client.get(info.kind, name, namespace=ns or ""))
                    except StatusError as exc:
                        eprint(server_error(exc.status))
                        failed = True
            else:
                objs, _ = await client.list(info.kind, namespace=ns, label_selector=args.selector)
            for obj in objs:
                if printed:
                    print()
                print(describe_object(obj, await _events_for(client, info, obj)), flush=True)
                printed += 1
        if not printed and not failed:
            eprint("No resources found")
        return 1 if failed else 0

    return run_client(args, body)
