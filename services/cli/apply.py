"""``draflow apply -f FILE|DIR|-`` and ``draflow create -f ...``: send manifests to the apiserver.

Prints one line per object as kubectl does (``deviceclass.resource.k8s.io/gpu.example.com
created|configured|unchanged``) and each refusal on stderr (``Error from server (Invalid): error
when creating "claim.yaml": ResourceClaim.resource.k8s.io "x" is invalid: ...``). Documents are
applied in order, so a Namespace earlier in a file exists for the objects after it. Exit code 1
when any object was refused.
"""

from __future__ import annotations

import argparse
from typing import Any

from draflow.events.api.registry import lookup_wire
from draflow.services.cli.common import (
    add_connection_args,
    discover,
    eprint,
    info_for_kind,
    run_client,
    server_error,
)
from draflow.services.cli.main import UserError
from draflow.services.cli.manifests import Doc, read_manifests
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import ItemResult, StatusError

__all__ = ["register", "report", "run_apply", "run_create"]


def _add_file_args(p: argparse.ArgumentParser, verb: str) -> None:
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        default=[],
        metavar="FILE",
        help=f"file, directory or - to {verb}",
    )
    p.add_argument("-R", "--recursive", action="store_true", help="process directories recursively")
    p.add_argument("-n", "--namespace", help="namespace for objects that name none")
    p.add_argument(
        "--dry-run",
        choices=("none", "server", "client"),
        default="none",
        help="server: the apiserver decides but stores nothing; client: only say what would be sent",
    )
    p.add_argument("-o", "--output", choices=("name",), help="print only resource/name")
    add_connection_args(p)


def register(sub: Any) -> None:
    p = sub.add_parser("apply", help="create or update objects from files (kubectl apply -f)")
    _add_file_args(p, "apply")
    p.set_defaults(func=run_apply)
    p = sub.add_parser("create", help="create objects from files; generateName allowed (kubectl create -f)")
    _add_file_args(p, "create")
    p.set_defaults(func=run_create)


def run_apply(args: argparse.Namespace) -> int:
    return _run(args, create_only=False)


def run_create(args: argparse.Namespace) -> int:
    return _run(args, create_only=True)


def _run(args: argparse.Namespace, create_only: bool) -> int:
    docs = read_manifests(args.filename, args.recursive)
    if not docs:  # as kubectl: an empty file or stdin is a mistake, not a success
        raise UserError(f"no objects passed to {'create' if create_only else 'apply'}")

    async def body(client: ApiClient) -> int:
        await discover(client)  # custom kinds: their names for the outcome lines
        if args.dry_run == "client":
            return await client_dry_run(
                client,
                docs,
                namespace=args.namespace or "",
                create_only=create_only,
                names_only=args.output == "name",
            )
        return await apply_docs(
            client,
            docs,
            namespace=args.namespace or "",
            create_only=create_only,
            dry_run=args.dry_run == "server",
            names_only=args.output == "name",
        )

    return run_client(args, body)


async def apply_docs(
    client: ApiClient,
    docs: list[Doc],
    *,
    namespace: str = "",
    create_only: bool = False,
    dry_run: bool = False,
    names_only: bool = False,
) -> int:
    """Apply the readable documents (grouped by source, in order); print outcomes; exit code."""
    failed = False
    i = 0
    while i < len(docs):
        source = docs[i].source
        group: list[Doc] = []
        while i < len(docs) and docs[i].source == source:
            group.append(docs[i])
            i += 1
        good = [d for d in group if not d.error]
        results = await client.apply(
            [d.manifest for d in good],
            source=source,
            namespace=namespace,
            enforce_namespace=bool(namespace),
            create_only=create_only,
            dry_run=dry_run,
        )
        if any(r.error is None and info_for_kind(r.kind) is None for r in results):
            await discover(client)  # kinds of CRDs this very request created
        by_doc = iter(results)
        for doc in group:
            if doc.error:
                eprint(f"error: {doc.error}")
                failed = True
                continue
            if not report(next(by_doc), source, dry_run=dry_run, names_only=names_only):
                failed = True
    return 1 if failed else 0


async def client_dry_run(
    client: ApiClient, docs: list[Doc], *, namespace: str, create_only: bool, names_only: bool
) -> int:
    """``--dry-run=client``: what would be sent, nothing decided by the server. ``create`` says
    created; ``apply`` asks whether each object exists (created or configured), as kubectl does."""
    failed = False
    for doc in docs:
        if doc.error:
            eprint(f"error: {doc.error}")
            failed = True
            continue
        manifest: dict[str, Any] = doc.manifest if isinstance(doc.manifest, dict) else {}
        raw_meta = manifest.get("metadata")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        kind, name = str(manifest.get("kind") or ""), str(meta.get("name") or meta.get("generateName") or "")
        api_version = str(manifest.get("apiVersion") or "")
        wire = lookup_wire(api_version, kind)
        info = info_for_kind(wire.stored_kind) if wire is not None else None
        if info is None:
            eprint(
                f'error: resource mapping not found for name: "{name}" namespace: '
                f'"{meta.get("namespace") or ""}" from "{doc.source}": no matches for kind "{kind}" in '
                f'version "{api_version}"'
            )
            failed = True
            continue
        outcome = "created"
        if not create_only and meta.get("name"):
            ns = (meta.get("namespace") or namespace or "default") if info.namespaced else ""
            try:
                await client.get(info.kind, name, namespace=ns)
                outcome = "configured"
            except StatusError as exc:
                if exc.status.code != 404:
                    eprint(server_error(exc.status))
                    failed = True
                    continue
        ref = info.ref(name)
        print(ref if names_only else f"{ref} {outcome} (dry run)", flush=True)
    return 1 if failed else 0


def report(result: ItemResult, source: str, *, dry_run: bool = False, names_only: bool = False) -> bool:
    """Print one object's outcome (stdout) or refusal (stderr); True when it succeeded."""
    info = info_for_kind(result.kind)
    ref = info.ref(result.name) if info is not None else f"{result.kind.lower()}/{result.name}"
    err = result.error
    if err is None:
        suffix = " (server dry run)" if dry_run else ""
        print(ref if names_only else f"{ref} {result.outcome}{suffix}", flush=True)
        return True
    if err.reason == "NoKindMatch":
        eprint(
            f'error: resource mapping not found for name: "{result.name}" namespace: "{result.namespace}" '
            f'from "{source}": {err.message}\nensure CRDs are installed first'
        )
    else:
        doing = "patching" if result.operation == "update" else "creating"
        eprint(server_error(err, f'error when {doing} "{source}": '))
    return False
