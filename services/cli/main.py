"""The `draflow` command line: a thin dispatcher over one module per command group.

Each module named in COMMANDS exposes ``register(subparsers)``, which adds its
sub-commands and sets ``func`` (``(args) -> int``) on each parser. Modules are
imported lazily so ``draflow version`` does not pay for NATS or the allocator.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from draflow.infra.auth.authority import AuthorityError
from draflow.infra.errors import HistoryUnavailable, StreamReset
from draflow.infra.ports import PortError

# command group module -> the sub-command names it registers (for lazy import)
COMMANDS: dict[str, tuple[str, ...]] = {
    "draflow.services.cli.version": ("version",),
    "draflow.services.cli.log": ("log",),
    "draflow.services.cli.allocate": ("allocate",),
    "draflow.services.cli.apply": ("apply", "create"),
    "draflow.services.cli.get": ("get",),
    "draflow.services.cli.describe": ("describe",),
    "draflow.services.cli.delete": ("delete",),
    "draflow.services.cli.events": ("events",),
    "draflow.services.cli.export": ("export", "import"),
    "draflow.services.cli.backup": ("backup", "restore"),
    "draflow.services.cli.archive": ("archive",),
    "draflow.services.cli.trace": ("trace",),
    "draflow.services.cli.dlq": ("dlq",),
    "draflow.services.cli.explain": ("explain",),
    "draflow.services.cli.simulate": ("simulate",),
    "draflow.services.cli.verify": ("verify-replay",),
    "draflow.services.cli.check": ("check",),
    "draflow.services.cli.replay": ("replay", "rebuild"),
    "draflow.services.cli.podresources": ("podresources",),
    "draflow.services.cli.up": ("up", "examples"),
    "draflow.services.cli.token": ("token",),
}


class UserError(Exception):
    """An error caused by the user's input: printed as one line, no traceback."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="draflow", description="DRA as an event-sourced workflow engine")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name, names in COMMANDS.items():
        if only is not None and only not in names:
            continue
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    first = next((a for a in args_list if not a.startswith("-")), None)
    known = {n for names in COMMANDS.values() for n in names}
    parser = build_parser(first if first in known else None)
    args = parser.parse_args(args_list)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    # PortError: DRAFLOW_PORT_OFFSET that cannot be used; AuthorityError: no credential to connect with
    # HistoryUnavailable: a read before the oldest retained history (stream and archive)
    except (UserError, PortError, AuthorityError, HistoryUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except StreamReset as exc:  # `draflow get -w` while the stream is deleted and created again
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `draflow get sagas | head`: the reader is gone, stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    raise SystemExit(main())
