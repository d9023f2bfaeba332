"""What the kubectl-like commands share: the connection flags, resource names and error lines.

Errors are printed the way kubectl prints them, on stderr: ``Error from server (NotFound):
resourceclaims.resource.k8s.io "x" not found`` for refusals, ``error: ...`` for problems found
before asking the server. Commands return exit code 1 when anything failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from collections.abc import Callable as Fn
from dataclasses import dataclass
from typing import Any, TypeVar

import nats.errors

from draflow.events.api.apiextensions_v1 import CustomResourceDefinition
from draflow.events.api.codec import decode_object
from draflow.events.api.registry import lookup_resource, resource_types
from draflow.events.objects import EVENT_KIND
from draflow.infra.config import Settings
from draflow.services.cli.connection import add_nats_url_arg, settings_for
from draflow.services.cli.main import UserError
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.crds import serve_crds
from draflow.services.runtime.protocol import Status, StatusError

__all__ = [
    "ResourceInfo",
    "add_connection_args",
    "add_namespace_args",
    "discover",
    "discovering",
    "eprint",
    "resolve_type",
    "run_client",
    "server_error",
]


@dataclass(frozen=True)
class ResourceInfo:
    """A resource type as the CLI names it (``resourceclaims``, ``resourceclaim.resource.k8s.io``)."""

    kind: str
    plural: str
    singular: str
    group: str
    namespaced: bool

    @property
    def qualified_singular(self) -> str:
        """``resourceclaim.resource.k8s.io``, ``pod``: the prefix of ``-o name`` and apply lines."""
        return f"{self.singular}.{self.group}" if self.group else self.singular

    @property
    def qualified_plural(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def ref(self, name: str) -> str:
        return f"{self.qualified_singular}/{name}"


EVENTS = ResourceInfo(EVENT_KIND, "events", "event", "", True)
# Short names the CLI adds where upstream has none (kubectl's ``rc`` is replicationcontrollers,
# which draflow does not serve).
ALIASES = {"rc": "resourceclaims", "rct": "resourceclaimtemplates", "dc": "deviceclasses"}


def resolve_type(name: str) -> ResourceInfo:
    """Any spelling kubectl accepts: kind, plural, singular, short name, ``plural.group``."""
    if name.lower() in ("events", "event", "ev", "events.v1", "events.events.k8s.io"):
        return EVENTS
    rt = lookup_resource(ALIASES.get(name.lower(), name))
    if rt is None:
        raise UserError(f'the server doesn\'t have a resource type "{name}"')
    return ResourceInfo(rt.kind, rt.plural, rt.singular, rt.group, rt.namespaced)


T = TypeVar("T")


async def discover(client: ApiClient) -> None:
    """Serve the cluster's custom resources in this process (kubectl's discovery): their kinds,
    names and printer columns come from the CustomResourceDefinitions the apiserver holds."""
    items, _ = await client.list(CustomResourceDefinition.KIND, namespace="")
    crds = [decode_object(item) for item in items]
    serve_crds(c for c in crds if isinstance(c, CustomResourceDefinition))


def discovering(args: argparse.Namespace, resolve: Fn[[], T]) -> T:
    """``resolve()`` (resource names -> types); when a name is unknown, ask the apiserver for its
    custom resources and try once more (the first error stands when that does not help)."""
    try:
        return resolve()
    except UserError as first:
        try:

            async def body(client: ApiClient) -> int:
                await discover(client)
                return 0

            run_client(args, body)
        except UserError:
            raise first from None
        return resolve()


def info_for_kind(kind: str) -> ResourceInfo | None:
    if kind == EVENT_KIND:
        return EVENTS
    for rt in resource_types():
        if rt.kind == kind:
            return ResourceInfo(rt.kind, rt.plural, rt.singular, rt.group, rt.namespaced)
    return None


def add_connection_args(p: argparse.ArgumentParser) -> None:
    add_nats_url_arg(p)
    p.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for the apiserver (default 30)",
    )


def add_namespace_args(p: argparse.ArgumentParser, all_namespaces: bool = True) -> None:
    p.add_argument("-n", "--namespace", help="the namespace (default: default)")
    if all_namespaces:
        p.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")


def settings_from(args: argparse.Namespace) -> Settings:
    return settings_for(getattr(args, "nats_url", None))


def eprint(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def server_error(status: Status, context: str = "") -> str:
    """``Error from server (Reason): [context: ]message`` as kubectl prints refusals."""
    return f"Error from server ({status.reason}): {context}{status.message}"


def run_client(args: argparse.Namespace, body: Callable[[ApiClient], Awaitable[int]]) -> int:
    """Connect, run ``body`` with a client, close; returns its exit code. Connection problems
    become one-line errors; a refusal the body does not handle is printed (exit code 1)."""
    settings = settings_from(args)

    async def main() -> int:
        try:
            client = await ApiClient.connect(
                settings,
                actor="draflow-cli",
                timeout_s=args.request_timeout,
                connect_timeout_s=1.5,
                wait_for_server_s=3.0,
            )
        except (OSError, TimeoutError, nats.errors.Error) as exc:
            raise UserError(
                f"cannot connect to {settings.nats_url}: {exc or type(exc).__name__} "
                "(is draflow running? set --nats-url or DRAFLOW_NATS_URL)"
            ) from None
        try:
            return await body(client)
        finally:
            await client.close()

    try:
        return asyncio.run(main())
    except StatusError as exc:
        eprint(server_error(exc.status))
        return 1
    except BrokenPipeError:  # `draflow get ... | head`: stop quietly, as a SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def saga_resources(resources: list[str]) -> list[str] | None:
    """``saga ID...``, or kubectl's ``saga/ID ...`` (what ``get sagas -o name`` prints, so
    ``draflow describe $(draflow get sagas -o name | head -1)`` works as with any kind), as
    ``["saga", ID...]``; None when the arguments are not about sagas."""
    if not resources:
        return None
    if resources[0].lower() in ("saga", "sagas"):
        return resources
    pairs = [r.partition("/") for r in resources]
    if all(kind.lower() in ("saga", "sagas") and sep and name for kind, sep, name in pairs):
        return ["saga", *(name for _, _, name in pairs)]
    return None
