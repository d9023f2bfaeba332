"""`draflow version`."""

from __future__ import annotations

import argparse
from importlib.metadata import version


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("version", help="print the draflow version")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(f"draflow {version('draflow')}")
    return 0
