"""Where the Kubernetes API listens (flag, DRAFLOW_KUBE_API, the port offset) and the apiserver
process serving it."""

from __future__ import annotations

import socket

import pytest

from infra.config import Settings
from infra.eventstore import EventStore
from services.apiserver.kubeapi.run import kube_api_address, parse_address
from tests.e2e.procs import Proc
from tests.helpers import wait_until


def test_address_from_flag_env_and_offset() -> None:
    assert kube_api_address(None, {}) is None  # not asked for: NATS only
    assert kube_api_address("", {}) == ("127.0.0.1", 8443)
    assert kube_api_address("", {"DRAFLOW_PORT_OFFSET": "1000"}) == ("127.0.0.1", 9443)
    assert kube_api_address(None, {"DRAFLOW_KUBE_API": "0.0.0.0:6443"}) == ("0.0.0.0", 6443)
    assert kube_api_address("", {"DRAFLOW_KUBE_API": "127.0.0.1:7443"}) == ("127.0.0.1", 7443)
    assert kube_api_address("127.0.0.1:1234", {"DRAFLOW_KUBE_API": "127.0.0.1:7443"}) == ("127.0.0.1", 1234)
    assert kube_api_address("", {"DRAFLOW_KUBE_API": "off"}) is None
    assert parse_address("https://[::1]:8443") == ("::1", 8443)
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_address("localhost")


def test_apiserver_serves_it_and_survives_a_taken_port(settings: Settings, event_store: EventStore) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = Proc(settings, "services.apiserver", ["--kube-api", f"127.0.0.1:{port}"])
        try:
            proc.expect("apiserver: serving", timeout_s=60)  # NATS is served all the same
            wait_until(
                lambda: any("cannot serve the Kubernetes API on 127.0.0.1:" in ln for ln in proc.stderr)
            )
        finally:
            assert proc.terminate() == 0
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    proc = Proc(settings, "services.apiserver", ["--kube-api", f"127.0.0.1:{port}"])
    try:
        proc.expect(f"apiserver: Kubernetes API on https://127.0.0.1:{port}", timeout_s=60)
        kubeconfig = (settings.data_dir / "kubeconfig").read_text()
        assert f"server: https://127.0.0.1:{port}" in kubeconfig
        assert (settings.data_dir / "kubeapi" / "tokens.csv").stat().st_mode & 0o077 == 0
    finally:
        assert proc.terminate() == 0
