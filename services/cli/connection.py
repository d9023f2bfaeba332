"""``--nats-url``: the one flag every ``draflow`` command takes to name the system it talks to.

``--server``/``-s`` (what the kubectl-like commands used to take) is accepted as a hidden alias so
existing scripts keep working. Without the flag: ``$DRAFLOW_NATS_URL``, else the NATS port of
``$DRAFLOW_PORT_OFFSET`` (``nats://127.0.0.1:4222`` when unset), exactly as the services decide.
"""

from __future__ import annotations

import argparse

import msgspec

from draflow.infra.auth.roles import CLI
from draflow.infra.config import Settings

__all__ = ["add_nats_url_arg", "settings_for"]


def add_nats_url_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nats-url",
        dest="nats_url",
        metavar="URL",
        help="NATS URL of the draflow system (default: $DRAFLOW_NATS_URL, else nats://127.0.0.1:4222 "
        "plus $DRAFLOW_PORT_OFFSET)",
    )
    p.add_argument("--server", "-s", dest="nats_url", metavar="URL", help=argparse.SUPPRESS)


def settings_for(url: str | None, role: str = CLI) -> Settings:
    """The environment's settings, with ``url`` (the flag's value) as the NATS URL when given.

    ``role``: whose credential the command uses when ``DRAFLOW_NATS_CREDS`` names none: ``cli``
    (the request API and reading the log), ``admin`` for what changes the log itself (import,
    backup, restore, dead letters); both are found in the data dir of a local system."""
    settings = msgspec.structs.replace(Settings.from_env(), role=role)
    return msgspec.structs.replace(settings, nats_url=url) if url else settings
