"""``draflow delete TYPE NAME... | TYPE/NAME... | -f FILE | TYPE -l SEL | TYPE --all``.

As kubectl: prints ``resourceclaim.resource.k8s.io "x" deleted`` as soon as the apiserver accepted
the deletion and then (``--wait``, the default) waits until the object is really gone, which for
an object with finalizers means until a controller removed the last one. Deleting a Namespace
deletes everything in it. ``--cascade=background|foreground|orphan`` is the propagation policy for
the object's dependents (the garbage collector's part). How long it waits and what it says while
waiting: :mod:`draflow.services.cli.waiting`. ``-f`` documents are resolved by their own apiVersion and
kind (a ``cdi.k8s.io/v1alpha1`` ResourceClaim is the classic claim, not resource.k8s.io's).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from draflow.events.api.registry import lookup_resource, lookup_wire
from draflow.services.cli.common import (
    ResourceInfo,
    add_connection_args,
    add_namespace_args,
    discover,
    eprint,
    info_for_kind,
    run_client,
    server_error,
)
from draflow.services.cli.get import parse_targets
from draflow.services.cli.main import UserError
from draflow.services.cli.manifests import read_manifests
from draflow.services.cli.waiting import Progress, describe, parse_duration
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import StatusError

__all__ = ["register", "run"]

Target = tuple[ResourceInfo, str, str, str]  # (type, namespace, name, source file or "")


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def register(sub: Any) -> None:
    p = sub.add_parser("delete", help="delete objects by name, file or selector (kubectl delete)")
    p.add_argument("resources", nargs="*", metavar="TYPE [NAME...] | TYPE/NAME")
    p.add_argument(
        "-f", "--filename", action="append", default=[], metavar="FILE", help="delete what FILE names"
    )
    p.add_argument("-R", "--recursive", action="store_true", help="process directories recursively")
    add_namespace_args(p)
    p.add_argument("-l", "--selector", default="", help="delete the objects matching a label selector")
    p.add_argument("--all", action="store_true", help="delete every object of the type in the namespace")
    p.add_argument("--ignore-not-found", action="store_true", help="no error for objects that do not exist")
    p.add_argument("--grace-period", type=int, default=None, help="seconds a running pod gets (0 = now)")
    p.add_argument("--force", action="store_true", help="delete running pods at once (grace period 0)")
    p.add_argument(
        "--cascade",
        default="background",
        nargs="?",
        const="background",
        help='"background" (default), "foreground" or "orphan": what happens to the dependents',
    )
    p.add_argument(
        "--wait", type=_bool, default=True, nargs="?", const=True, help="wait until gone (default true)"
    )
    p.add_argument(
        "--timeout",
        default="0",
        metavar="DURATION",
        help="give up waiting after this long (30s, 2m); 0 (default): after 60s without progress",
    )
    add_connection_args(p)
    p.set_defaults(func=run)


def cascade_policy(value: str) -> str:
    """kubectl's ``--cascade`` as a propagationPolicy (booleans are deprecated spellings)."""
    policies = {"background": "Background", "foreground": "Foreground", "orphan": "Orphan"}
    if value in policies:
        return policies[value]
    truth = value.lower()
    deprecated = f"warning: --cascade={value} is deprecated (boolean value) and can be replaced with"
    if truth in ("true", "1", "t"):
        eprint(f"{deprecated} --cascade=background.")
        return "Background"
    if truth in ("false", "0", "f"):
        eprint(f"{deprecated} --cascade=orphan.")
        return "Orphan"
    raise UserError(f'invalid cascade value ({value}). Must be "background", "foreground", or "orphan"')


def _file_targets(args: argparse.Namespace) -> tuple[list[Target], bool]:
    targets: list[Target] = []
    failed = False
    for doc in read_manifests(args.filename, args.recursive):
        if doc.error:
            eprint(f"error: {doc.error}")
            failed = True
            continue
        m = doc.manifest
        kind, meta = str(m.get("kind")), m.get("metadata") if isinstance(m.get("metadata"), dict) else {}
        name, ns = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        wire = lookup_wire(str(m.get("apiVersion")), kind)  # the document's own group and version
        rt = lookup_resource(wire.stored_kind) if wire is not None else None
        if rt is None or info_for_kind(rt.kind) is None:
            eprint(
                f'error: resource mapping not found for name: "{name}" namespace: "{ns}" '
                f'from "{doc.source}": no matches for kind "{kind}" in version "{m.get("apiVersion")}"'
                "\nensure CRDs are installed first"
            )
            failed = True
            continue
        info = info_for_kind(rt.kind)
        assert info is not None
        if not name:
            eprint(f'error: error when deleting "{doc.source}": resource name may not be empty')
            failed = True
            continue
        namespace = (ns or args.namespace or "default") if info.namespaced else ""
        targets.append((info, namespace, name, doc.source))
    return targets, failed


async def _selected(client: ApiClient, args: argparse.Namespace) -> list[Target]:
    targets: list[Target] = []
    try:
        parsed = parse_targets(args.resources)
    except UserError:
        await discover(client)  # a custom resource's name: learn the cluster's CRDs first
        parsed = parse_targets(args.resources)
    for info, names in parsed:
        ns = (None if args.all_namespaces else (args.namespace or "default")) if info.namespaced else ""
        if names:
            targets += [(info, (ns or "default") if info.namespaced else "", n, "") for n in names]
            continue
        if not (args.all or args.selector):
            raise UserError("resource(s) were provided, but no name was specified")
        items, _ = await client.list(info.kind, namespace=ns, label_selector=args.selector)
        for obj in items:
            meta = obj.get("metadata") or {}
            targets.append((info, str(meta.get("namespace") or ""), str(meta.get("name")), ""))
    return targets


async def _wait_gone(client: ApiClient, waiting: list[tuple[Target, str]], timeout_s: float) -> bool:
    """Poll until every target is gone (or re-created under another uid); say what is left when
    the wait is long and give up as :class:`~draflow.services.cli.waiting.Progress` decides."""
    progress = Progress(time.monotonic(), timeout_s)
    described_at = 0.0
    while True:
        left: dict[Target, dict[str, Any]] = {}
        for target, uid in waiting:
            info, ns, name, _ = target
            try:
                obj = await client.get(info.kind, name, namespace=ns)
            except StatusError as exc:
                if exc.status.code == 404:
                    continue
                raise
            if (obj.get("metadata") or {}).get("uid") == uid:
                left[target] = obj
        waiting = [(t, uid) for t, uid in waiting if t in left]
        if not waiting:
            return True
        now = time.monotonic()
        if now - described_at >= 1.0:  # describing lists a namespace's content: once a second
            described_at = now
            reasons = {t: await describe(client, obj) for t, obj in left.items()}
            progress.observe(now, tuple((t, tuple(r)) for t, r in reasons.items()))
            if progress.report_due(now, progress.state):
                for (info, _, name, _), why in reasons.items():
                    eprint(f"waiting for {info.qualified_plural}/{name} to be deleted: {'; '.join(why)}")
        if progress.expired(now):
            for info, _, name, _ in left:
                eprint(f"error: timed out waiting for the condition on {info.qualified_plural}/{name}")
            for (info, _, name, _), obj in left.items():
                still = "; ".join(await describe(client, obj))
                eprint(f"{info.qualified_plural}/{name} is still there {progress.limit_text()}: {still}")
            return False
        await asyncio.sleep(0.1)


def run(args: argparse.Namespace) -> int:
    if args.filename and args.resources:
        raise UserError("do not give resources and -f together")
    try:
        timeout_s = parse_duration(args.timeout)
    except ValueError as exc:
        raise UserError(f'invalid argument "{args.timeout}" for "--timeout" flag: {exc}') from None
    policy = cascade_policy(args.cascade)
    grace = 0 if args.force else args.grace_period
    if args.force:
        eprint(
            "Warning: Immediate deletion does not wait for confirmation that the running resource has "
            "been terminated. The resource may continue to run on the cluster indefinitely."
        )

    async def body(client: ApiClient) -> int:
        targets, failed = _file_targets(args) if args.filename else ([], False)
        if not args.filename:
            targets = await _selected(client, args)
            if not targets:
                eprint("No resources found")
                return 0
        results = await client.delete(
            [(t[0].kind, t[1], t[2]) for t in targets], grace_period_seconds=grace, propagation_policy=policy
        )
        waiting = []
        for target, result in zip(targets, results, strict=True):
            info, ns, name, src = target
            if result.error is None:
                print(f'{info.qualified_singular} "{name}" deleted', flush=True)
                if args.wait:
                    obj_uid = await _uid(client, info, ns, name)
                    if obj_uid:
                        waiting.append((target, obj_uid))
            elif not (result.error.code == 404 and args.ignore_not_found):
                eprint(server_error(result.error, f'error when deleting "{src}": ' if src else ""))
                failed = True
        if waiting and not await _wait_gone(client, waiting, timeout_s):
            failed = True
        return 1 if failed else 0

    return run_client(args, body)


async def _uid(client: ApiClient, info: ResourceInfo, ns: str, name: str) -> str:
    try:
        obj = await client.get(info.kind, name, namespace=ns)
    except StatusError:
        return ""
    return str((obj.get("metadata") or {}).get("uid") or "")
