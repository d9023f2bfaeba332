"""Settings every draflow process reads from its environment.

One place for the variable names and defaults, so the Procfile, the services, the CLI and the tests
agree on where the bus is and where data lives. The bus's default address follows
``DRAFLOW_PORT_OFFSET`` (``draflow.infra.ports``) like every other port of a system.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import msgspec

from draflow.events.subjects import DEFAULT_ROOT
from draflow.infra.ports import Ports

DEFAULT_NATS_URL = Ports().nats_url  # with DRAFLOW_PORT_OFFSET unset
DEFAULT_DATA_DIR = "./var"
DEFAULT_STREAM = "DRAFLOW"


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Where the bus is, where local state lives and how the event stream is named."""

    nats_url: str = DEFAULT_NATS_URL
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    stream: str = DEFAULT_STREAM
    # Subjects live under <root>.ev.> (events) and <root>.dlq.> (dead letters); tests use their own.
    root: str = DEFAULT_ROOT
    # JetStream de-duplication window for Nats-Msg-Id: a retried append within it is a no-op.
    duplicate_window_s: float = 120.0
    # who this process is (a role of draflow.infra.auth.roles; "" = its service name) and how it proves
    # it: a credential file (DRAFLOW_NATS_CREDS; else the role's own under the data dir, if any)
    role: str = ""
    creds: str = ""
    # TLS towards a remote server: the CA that signed its certificate, a client certificate
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    # copies of the event stream a JetStream cluster keeps (3 in the local cluster)
    stream_replicas: int = 1

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        ports = Ports.from_env(env)
        cluster = int(env.get("DRAFLOW_NATS_CLUSTER") or 0)
        default_url = ports.cluster_urls(cluster) if cluster > 1 else ports.nats_url
        return cls(
            nats_url=env.get("DRAFLOW_NATS_URL") or default_url,
            data_dir=Path(env.get("DRAFLOW_DATA_DIR") or DEFAULT_DATA_DIR),
            stream=env.get("DRAFLOW_STREAM") or DEFAULT_STREAM,
            root=env.get("DRAFLOW_SUBJECT_ROOT") or DEFAULT_ROOT,
            duplicate_window_s=float(env.get("DRAFLOW_DUPLICATE_WINDOW_S") or 120.0),
            creds=env.get("DRAFLOW_NATS_CREDS") or "",
            tls_ca=env.get("DRAFLOW_NATS_TLS_CA") or "",
            tls_cert=env.get("DRAFLOW_NATS_TLS_CERT") or "",
            tls_key=env.get("DRAFLOW_NATS_TLS_KEY") or "",
            stream_replicas=int(env.get("DRAFLOW_STREAM_REPLICAS") or 1),
        )

    @property
    def nats_host_port(self) -> tuple[str, int]:
        """Host and port of the first server in ``nats_url`` (for launching a local server)."""
        first = self.nats_url.split(",")[0].strip()
        if "://" not in first:
            first = "nats://" + first
        parts = urlsplit(first)
        return parts.hostname or "127.0.0.1", parts.port or 4222

    @property
    def dlq_stream(self) -> str:
        return f"{self.stream}_DLQ"

    def service_dir(self, service: str) -> Path:
        """A service's private directory under the data dir (SQLite projections, checkpoints)."""
        path = self.data_dir / service
        path.mkdir(parents=True, exist_ok=True)
        return path


def add_nats_url_arg(parser: argparse.ArgumentParser) -> None:
    """``--nats-url URL`` for a service that parses its own arguments (read by ``run_service``)."""
    parser.add_argument(
        "--nats-url",
        metavar="URL",
        help="NATS URL of the system (default: $DRAFLOW_NATS_URL, else nats://127.0.0.1:4222+$DRAFLOW_PORT_OFFSET)",
    )


def flag_from_argv(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``flag VALUE`` / ``flag=VALUE`` among a process's arguments (None when absent)."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None
