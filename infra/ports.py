"""Every TCP port a draflow system listens on, derived from one setting: ``DRAFLOW_PORT_OFFSET``.

With nothing set a system uses the usual ports (NATS 4222, OTLP/gRPC 4317, OTLP/HTTP 4318, the
Kubernetes API 8443, the services' Prometheus metrics 9101-9199). ``DRAFLOW_PORT_OFFSET=N`` adds N
to every one of them, so a second system on the same machine sets one variable (and its own
``DRAFLOW_DATA_DIR``) and shares no port with the first: its nats-server, its trace receiver, its
Kubernetes API, its metrics endpoints, and the URLs its services and the CLI connect to by default
all move together. A variable naming one address (``DRAFLOW_NATS_URL``,
``OTEL_EXPORTER_OTLP_ENDPOINT``, ``DRAFLOW_OTLP_ADDR``,
``DRAFLOW_KUBE_API``, ...) still wins over the derived default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["METRICS_SLOTS", "PORT_OFFSET_VAR", "PortError", "Ports"]

PORT_OFFSET_VAR = "DRAFLOW_PORT_OFFSET"
NATS = 4222
NATS_ROUTE = 6222  # a local JetStream cluster's route (server-to-server) ports: 6222, 6223, ...
CLUSTER_MAX = 5  # servers of a local cluster: client ports 4222-4226, route ports 6222-6226
OTLP_GRPC = 4317  # OTLP's registered ports
OTLP_HTTP = 4318
KUBE_API = 8443  # the Kubernetes API (HTTPS) the apiserver serves for kubectl
METRICS_BASE = 9100  # + a service's slot (the Procfile's DRAFLOW_METRICS_SLOT)
METRICS_SLOTS = range(1, 100)
MAX_OFFSET = 65535 - (METRICS_BASE + METRICS_SLOTS[-1])


class PortError(ValueError):
    """A port setting that cannot be used (not a number, out of range)."""


@dataclass(frozen=True)
class Ports:
    """The ports of one system: each default plus ``offset``."""

    offset: int = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Ports:
        env = os.environ if environ is None else environ
        raw = (env.get(PORT_OFFSET_VAR) or "").strip()
        if not raw:
            return cls()
        try:
            offset = int(raw)
        except ValueError:
            offset = -1
        if not 0 <= offset <= MAX_OFFSET:
            raise PortError(
                f"{PORT_OFFSET_VAR}={raw!r}: expected a whole number from 0 to {MAX_OFFSET} (added to every "
                f"port: NATS {NATS}, OTLP {OTLP_GRPC}/{OTLP_HTTP}, Kubernetes API {KUBE_API}, metrics "
                f"{METRICS_BASE + 1}-{METRICS_BASE + METRICS_SLOTS[-1]}; e.g. 1000 for a second system)"
            )
        return cls(offset)

    @property
    def nats(self) -> int:
        return NATS + self.offset

    def cluster_client(self, node: int) -> int:
        """Client port of server ``node`` (1-based) of a local cluster; server 1 is ``nats``."""
        self._check_node(node)
        return NATS + node - 1 + self.offset

    def cluster_route(self, node: int) -> int:
        self._check_node(node)
        return NATS_ROUTE + node - 1 + self.offset

    def cluster_urls(self, size: int) -> str:
        """Every server of a local cluster of ``size``, as one comma-separated NATS URL."""
        return ",".join(f"nats://127.0.0.1:{self.cluster_client(n)}" for n in range(1, size + 1))

    @staticmethod
    def _check_node(node: int) -> None:
        if not 1 <= node <= CLUSTER_MAX:
            raise PortError(f"cluster server {node}: expected 1-{CLUSTER_MAX}")

    @property
    def otlp_grpc(self) -> int:
        return OTLP_GRPC + self.offset

    @property
    def otlp_http(self) -> int:
        return OTLP_HTTP + self.offset

    @property
    def kube_api(self) -> int:
        return KUBE_API + self.offset

    def metrics(self, slot: int) -> int:
        """The metrics port of the service in ``slot`` (1-99; the Procfile gives each service one)."""
        if slot not in METRICS_SLOTS:
            raise PortError(f"metrics slot {slot}: expected {METRICS_SLOTS[0]}-{METRICS_SLOTS[-1]}")
        return METRICS_BASE + slot + self.offset

    @property
    def nats_url(self) -> str:
        return f"nats://127.0.0.1:{self.nats}"

    @property
    def otlp_http_url(self) -> str:
        """The trace receiver's base URL: OTLP/HTTP ingest (``/v1/traces``) and the query API."""
        return f"http://127.0.0.1:{self.otlp_http}"

    @property
    def otlp_grpc_url(self) -> str:
        return f"http://127.0.0.1:{self.otlp_grpc}"
