"""Where the Kubernetes API listens and how the apiserver process starts it.

The address: ``--kube-api ADDR`` on the apiserver, else ``DRAFLOW_KUBE_API``, else
``127.0.0.1:8443`` plus ``DRAFLOW_PORT_OFFSET`` (``infra.ports``). ``off`` turns it off. It is
served when the apiserver is started with ``--kube-api`` (the Procfile does) or when
``DRAFLOW_KUBE_API`` names an address.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from infra.config import Settings
from infra.ports import Ports
from services.apiserver.kubeapi.auth import load_or_create, write_kubeconfig
from services.apiserver.kubeapi.server import KubeApi
from services.apiserver.server import ApiServer

__all__ = ["KUBE_API_VAR", "kube_api_address", "start_kube_api"]

KUBE_API_VAR = "DRAFLOW_KUBE_API"
_OFF = frozenset({"off", "none", "false", "0", "no"})


def parse_address(text: str) -> tuple[str, int]:
    text = text.strip()
    for prefix in ("https://", "http://"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{KUBE_API_VAR}/--kube-api {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8443")
    return host.strip("[]") or "127.0.0.1", int(port)


def kube_api_address(flag: str | None, environ: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """``flag`` is None when ``--kube-api`` was not given, "" when given without an address."""
    env = os.environ if environ is None else environ
    value = flag if flag else (env.get(KUBE_API_VAR) or "").strip()
    if flag is None and not value:
        return None
    if value.lower() in _OFF:
        return None
    if value:
        return parse_address(value)
    return "127.0.0.1", Ports.from_env(env).kube_api


def kubeconfig_path(settings: Settings) -> Path:
    return settings.data_dir / "kubeconfig"


async def start_kube_api(api: ApiServer, settings: Settings, address: tuple[str, int]) -> KubeApi:
    host, port = address
    creds = load_or_create(settings.data_dir / "kubeapi", host)
    kube = KubeApi(api, host=host, port=port, credentials=creds)
    await kube.start()
    write_kubeconfig(creds, kube.url, kubeconfig_path(settings))
    return kube
