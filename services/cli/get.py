"""``draflow get TYPE [NAME...] | TYPE/NAME... [-n NS | -A] [-l SEL] [-o wide|yaml|json|name] [-w]``.

``--as-of-seq N`` / ``--as-of-time T`` fold the log up to that point instead of asking the apiserver
(``draflow.services.cli.asof``); ``get sagas [ID...] [--state S]`` lists sagas
(``draflow.services.cli.sagas``).

Types may be written as kind, plural, singular or short name (``rc`` is not an upstream short
name; ``resourceclaims``, ``resourceclaim``, ``ResourceClaim``, ``po``, ``no``, ``ns`` are), and
several may be joined by commas. ``-w`` prints the table and then one row per change, as kubectl.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from draflow.events.api.codec import encode_object, object_meta
from draflow.projections.objects import ObjectIndex
from draflow.services.apiserver import errors
from draflow.services.cli.asof import (
    add_as_of_args,
    as_of_requested,
    bound_time,
    fold_objects,
    open_log,
    resolve_bound,
)
from draflow.services.cli.common import (
    ResourceInfo,
    add_connection_args,
    add_namespace_args,
    discovering,
    eprint,
    resolve_type,
    run_client,
    saga_resources,
    server_error,
)
from draflow.services.cli.jsonpath import JSONPathError, Template, evaluate, render_value
from draflow.services.cli.main import UserError
from draflow.services.runtime import printers
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import StatusError
from draflow.services.runtime.selectors import SelectorError, parse_field_selector, parse_label_selector

__all__ = ["parse_targets", "register", "run"]

Obj = dict[str, Any]


def register(sub: Any) -> None:
    p = sub.add_parser("get", help="list objects or get some by name (kubectl get)")
    p.add_argument("resources", nargs="*", metavar="TYPE [NAME...] | TYPE/NAME")
    add_namespace_args(p)
    p.add_argument("-l", "--selector", default="", help="label selector (a=b,c!=d,e in (f,g),!h)")
    p.add_argument("--field-selector", default="", help="field selector (metadata.name=x,spec.nodeName=y)")
    p.add_argument(
        "-o",
        "--output",
        type=_output_format,
        help="wide|yaml|json|name|jsonpath=TEMPLATE|custom-columns=HEADER:PATH,...",
    )
    p.add_argument("--sort-by", default="", help="sort by a JSONPath expression (.metadata.name)")
    p.add_argument("-w", "--watch", action="store_true", help="after listing, print changes as they happen")
    p.add_argument("--watch-only", action="store_true", help="print changes only, no initial list")
    p.add_argument("--no-headers", action="store_true", help="tables without the header line")
    p.add_argument("--show-labels", action="store_true", help="add a LABELS column")
    p.add_argument("--ignore-not-found", action="store_true", help="no error for names that do not exist")
    add_as_of_args(p)
    p.add_argument(
        "--state", default=None, help="get sagas: only sagas in this state (Running, Completed, ...)"
    )
    add_connection_args(p)
    p.set_defaults(func=run)


_FORMATS = ("wide", "yaml", "json", "name")


def _output_format(value: str) -> str:
    """kubectl's -o values draflow prints (checked while parsing, as argparse choices were)."""
    if value in _FORMATS:
        return value
    kind, sep, spec = value.partition("=")
    if sep and kind in ("jsonpath", "custom-columns") and spec:
        try:
            if kind == "jsonpath":
                Template(spec)
            else:
                _columns(spec)
        except JSONPathError as exc:
            raise argparse.ArgumentTypeError(f"error parsing {kind} {spec}: {exc}") from None
        return value
    raise argparse.ArgumentTypeError(
        f"unable to match a printer suitable for the output format {value!r}, allowed formats are: "
        "custom-columns,json,jsonpath,name,wide,yaml"
    )


def _columns(spec: str) -> list[tuple[str, str]]:
    out = []
    for part in spec.split(","):
        header, sep, path = part.partition(":")
        if not sep or not header:
            raise JSONPathError(f"unexpected custom-columns spec: {part}, expected <header>:<json-path-expr>")
        path = path.strip()
        if path.startswith("{") and path.endswith("}"):
            path = path[1:-1]
        out.append((header, path))
    return out


def _template_path(expr: str) -> str:
    expr = expr.strip()
    return expr[1:-1] if expr.startswith("{") and expr.endswith("}") else expr


def _sorted(objs: list[Obj], sort_by: str) -> list[Obj]:
    """--sort-by: numbers numerically, everything else as text; objects without the field first."""
    path = _template_path(sort_by)

    def key(o: Obj) -> tuple[int, float, str]:
        found = evaluate(path, o)
        if not found:
            return (0, 0.0, "")
        v = found[0]
        if isinstance(v, int | float) and not isinstance(v, bool):
            return (1, float(v), "")
        return (2, 0.0, render_value(v))

    return sorted(objs, key=key)


def _custom_rows(objs: list[Obj], spec: str, headers: bool) -> list[list[str]]:
    cols = _columns(spec)
    rows = [[h for h, _ in cols]] if headers else []
    for o in objs:
        row = []
        for _, path in cols:
            found = [v for v in evaluate(path, o) if v is not None]
            row.append(",".join(render_value(v) for v in found) if found else "<none>")
        rows.append(row)
    return rows


def parse_targets(words: list[str]) -> list[tuple[ResourceInfo, list[str]]]:
    """``TYPE[,TYPE] [NAME...]`` or ``TYPE/NAME...`` -> [(type, names)] (no names = all)."""
    if not words:
        raise UserError("you must specify the type of resource to get")
    if "/" in words[0]:
        out: list[tuple[ResourceInfo, list[str]]] = []
        for word in words:
            kind, sep, name = word.partition("/")
            if not sep or not kind or not name:
                raise UserError(
                    f"there is no need to specify a resource type as a separate argument: {word!r}"
                )
            info = resolve_type(kind)
            for existing, names in out:
                if existing == info:
                    names.append(name)
                    break
            else:
                out.append((info, [name]))
        return out
    types = [resolve_type(t) for t in words[0].split(",") if t]
    names = words[1:]
    if names and len(types) > 1:
        raise UserError("names cannot be given with several resource types; use TYPE/NAME")
    return [(t, list(names)) for t in types]


def _namespace(args: argparse.Namespace, info: ResourceInfo) -> str | None:
    if not info.namespaced:
        return ""
    return None if args.all_namespaces else (args.namespace or "default")


async def _fetch(
    client: ApiClient, args: argparse.Namespace, info: ResourceInfo, names: list[str]
) -> tuple[list[Obj], bool]:
    """The objects to print and whether any name was missing (already reported)."""
    ns = _namespace(args, info)
    if not names:
        items, _ = await client.list(
            info.kind, namespace=ns, label_selector=args.selector, field_selector=args.field_selector
        )
        return items, False
    found, missing = [], False
    for name in names:
        try:
            found.append(await client.get(info.kind, name, namespace=ns or ""))
        except StatusError as exc:
            if exc.status.code == 404 and args.ignore_not_found:
                continue
            eprint(server_error(exc.status))
            missing = True
    return found, missing


def _table(info: ResourceInfo, objs: list[Obj], args: argparse.Namespace, prefix: bool) -> list[list[str]]:
    wide = args.output == "wide"
    all_ns = bool(args.all_namespaces) and info.namespaced
    rows: list[list[str]] = []
    if not args.no_headers:
        rows.append(
            printers.headers(info.kind, wide, namespace=all_ns) + (["LABELS"] if args.show_labels else [])
        )
    for obj in objs:
        row = printers.row(
            info.kind,
            obj,
            wide,
            namespace=all_ns,
            name_prefix=info.qualified_singular + "/" if prefix else "",
        )
        if args.show_labels:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            row.append(",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>")
        rows.append(row)
    return rows


def _print_objects(objs: list[Obj], args: argparse.Namespace, single: bool) -> None:
    objs = [printers.as_shown(o) for o in objs]
    value: Any = objs[0] if single and len(objs) == 1 else printers.as_list(objs)
    if args.output == "yaml":
        sys.stdout.write(printers.to_yaml(value))
    else:
        print(printers.to_json(value))


def _table_output(args: argparse.Namespace) -> bool:
    """kubectl says "No resources found" (on stderr) only where it prints a table."""
    return args.output in (None, "wide")


def _no_resources(args: argparse.Namespace, targets: list[tuple[ResourceInfo, list[str]]]) -> str:
    if args.all_namespaces or not any(info.namespaced for info, _ in targets):
        return "No resources found"
    return f"No resources found in {args.namespace or 'default'} namespace."


def _fetch_from(
    index: ObjectIndex, args: argparse.Namespace, info: ResourceInfo, names: list[str]
) -> tuple[list[Obj], bool]:
    """``_fetch`` over a folded index (``--as-of-*``): same filters, same errors."""
    ns = _namespace(args, info)
    if names:
        found, missing = [], False
        for name in names:
            obj = index.get(info.kind, ns or "", name)
            if obj is not None:
                found.append(encode_object(obj))
            elif not args.ignore_not_found:
                eprint(server_error(errors.not_found(info.kind, name).status))
                missing = True
        return found, missing
    try:
        labels = parse_label_selector(args.selector)
        _, fields = parse_field_selector(args.field_selector)
    except SelectorError as exc:
        raise UserError(str(exc)) from None
    items = []
    for obj in index.items(info.kind, ns):
        if not labels(object_meta(obj).labels):
            continue
        enc = encode_object(obj)
        if args.field_selector and not fields(enc):
            continue
        items.append(enc)
    return items, False


def _run_as_of(args: argparse.Namespace, targets: list[tuple[ResourceInfo, list[str]]]) -> int:
    async def body() -> int:
        async with open_log(args) as store:
            bound = await resolve_bound(store, args)
            index = await fold_objects(store, bound)
            when = await bound_time(store, args, bound)
        failed = False
        fetched: list[tuple[ResourceInfo, list[Obj]]] = []
        for info, names in targets:
            objs, missing = _fetch_from(index, args, info, names)
            failed |= missing
            fetched.append((info, objs))
        with printers.clock_at(when):  # AGE as it was at that point of the log
            _print(fetched, args, targets)
        if not any(objs for _, objs in fetched) and not failed and not any(n for _, n in targets):
            if _table_output(args):
                eprint(_no_resources(args, targets))
        return 1 if failed else 0

    return asyncio.run(body())


def run(args: argparse.Namespace) -> int:
    if (sagas := saga_resources(args.resources)) is not None:
        from draflow.services.cli.sagas import run_get

        args.resources = sagas
        return run_get(args)
    if args.state is not None:
        raise UserError("--state applies to sagas only")
    targets = discovering(args, lambda: parse_targets(args.resources))
    if args.all_namespaces and any(names for _, names in targets):
        raise UserError("a resource cannot be retrieved by name across all namespaces")
    if (args.watch or args.watch_only) and len(targets) != 1:
        raise UserError("you may only specify a single resource type to watch")
    if as_of_requested(args):
        if args.watch or args.watch_only:
            raise UserError("--as-of-seq/--as-of-time show the past and cannot be watched")
        return _run_as_of(args, targets)

    async def body(client: ApiClient) -> int:
        failed = False
        fetched: list[tuple[ResourceInfo, list[Obj]]] = []
        for info, names in targets:
            if not args.watch_only:
                objs, missing = await _fetch(client, args, info, names)
                failed |= missing
                fetched.append((info, objs))
        total = sum(len(objs) for _, objs in fetched)
        widths = _print(fetched, args, targets)
        quiet = not _table_output(args) or args.watch_only
        if total == 0 and not failed and not any(names for _, names in targets) and not quiet:
            eprint(_no_resources(args, targets))
        if args.watch or args.watch_only:
            await _watch(client, args, targets[0][0], targets[0][1], widths)
        return 1 if failed else 0

    return run_client(args, body)


def _print(
    fetched: list[tuple[ResourceInfo, list[Obj]]], args: argparse.Namespace, targets: list[Any]
) -> list[int] | None:
    out = args.output or ""
    if args.sort_by:
        try:
            fetched = [(info, _sorted(objs, args.sort_by)) for info, objs in fetched]
        except JSONPathError as exc:
            raise UserError(f"couldn't sort by {args.sort_by}: {exc}") from None
    objs_all = [o for _, objs in fetched for o in objs]
    single = len(targets) == 1 and len(targets[0][1]) == 1
    if out.startswith("jsonpath="):
        if objs_all or not single:
            value = (
                printers.as_shown(objs_all[0])
                if single and len(objs_all) == 1
                else printers.as_list([printers.as_shown(o) for o in objs_all])
            )
            try:
                sys.stdout.write(Template(out.split("=", 1)[1]).render(value))
            except JSONPathError as exc:
                raise UserError(f"error executing jsonpath {out.split('=', 1)[1]!r}: {exc}") from None
            sys.stdout.flush()
        return None
    if out.startswith("custom-columns="):
        rows = _custom_rows(
            [printers.as_shown(o) for o in objs_all], out.split("=", 1)[1], not args.no_headers
        )
        if objs_all:
            for line in printers.format_table(rows):
                print(line)
        return None
    if out == "name":
        for info, objs in fetched:
            for o in objs:
                print(info.ref(str((o.get("metadata") or {}).get("name", ""))))
        return None
    if out in ("yaml", "json"):
        # nothing found is an empty List, as kubectl prints it (scripts pipe this into jq);
        # a single name asked for and missing printed its error and nothing else
        watching = getattr(args, "watch", False) or getattr(args, "watch_only", False)
        if objs_all or not (single or watching):
            _print_objects(objs_all, args, single)
        return None
    widths: list[int] | None = None
    prefix = len(fetched) > 1
    first = True
    for info, objs in fetched:
        if not objs:
            continue
        rows = _table(info, objs, args, prefix)
        widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(len(r) for r in rows))]
        if not first:
            print()
        first = False
        for line in printers.format_table(rows, widths):
            print(line)
    sys.stdout.flush()
    return widths


async def _watch(
    client: ApiClient,
    args: argparse.Namespace,
    info: ResourceInfo,
    names: list[str],
    widths: list[int] | None,
) -> None:
    ns = _namespace(args, info)
    header_due = widths is None and args.output in (None, "wide") and not args.no_headers
    async for change in client.watch(info.kind, namespace=ns, label_selector=args.selector, initial=False):
        obj = encode_object(change.object)
        name = str(obj.get("metadata", {}).get("name", ""))
        if names and name not in names:
            continue
        if args.output == "name":
            print(info.ref(name), flush=True)
            continue
        if args.output and args.output.startswith(("jsonpath=", "custom-columns=")):
            single_args = argparse.Namespace(**{**vars(args), "no_headers": True, "sort_by": ""})
            _print([(info, [obj])], single_args, [(info, [name])])
            sys.stdout.flush()
            continue
        if args.output in ("yaml", "json"):
            print("---" if args.output == "yaml" else "", end="\n" if args.output == "yaml" else "")
            _print_objects([obj], args, True)
            sys.stdout.flush()
            continue
        rows = _table(info, [obj], args, False)
        if not header_due:
            rows = rows[1:] if not args.no_headers else rows
        header_due = False
        cur = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        widths = [max(a, b) for a, b in zip(widths or cur, cur, strict=False)]
        for line in printers.format_table(rows, widths):
            print(line, flush=True)
