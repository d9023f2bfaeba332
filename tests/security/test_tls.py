"""TLS towards a remote server: DRAFLOW_NATS_TLS_CA verifies it, a client certificate proves us.

A real nats-server with a certificate signed by a CA the test makes (openssl), requiring TLS and
verifying client certificates: connecting with the CA and a client certificate works; without the
CA the server's certificate is not trusted, without the client certificate the server refuses.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest

from draflow.infra.config import Settings
from draflow.infra.nats_client import connect
from draflow.infra.natsd import LocalNatsServer, free_port

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d: Path) -> None:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=draflow test CA",
        cwd=d,
    )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={name}",
            cwd=d,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            cwd=d,
        )


@pytest.fixture
def tls_server(tmp_path: Path):
    make_pki(tmp_path)
    port = free_port()
    conf = tmp_path / "server.conf"
    tls = {
        "cert_file": str(tmp_path / "server.pem"),
        "key_file": str(tmp_path / "server.key"),
        "ca_file": str(tmp_path / "ca.pem"),
        "verify": True,
    }
    conf.write_text(
        f'listen: "127.0.0.1:{port}"\njetstream {{ store_dir: "{tmp_path / "store"}" }}\n'
        f"tls {json.dumps(tls)}\n"
    )
    server = LocalNatsServer(tmp_path / "store", port, config=conf)
    server.start()
    try:
        yield server, tmp_path
    finally:
        server.stop()


async def test_tls_with_the_ca_and_a_client_certificate(tls_server) -> None:
    server, pki = tls_server
    settings = Settings(
        nats_url=f"tls://127.0.0.1:{server.port}",
        data_dir=pki / "data",
        tls_ca=str(pki / "ca.pem"),
        tls_cert=str(pki / "client.pem"),
        tls_key=str(pki / "client.key"),
    )
    nc = await connect(settings, "tls-test", connect_timeout_s=5)
    try:
        assert nc.is_connected
        await nc.flush()
    finally:
        await nc.close()

    untrusted = msgspec.structs.replace(settings, tls_ca="")  # the system's CAs do not know ours
    with pytest.raises(Exception, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        await connect(untrusted, "tls-test", connect_timeout_s=1)
    anonymous = msgspec.structs.replace(settings, tls_cert="", tls_key="")
    with pytest.raises(Exception):  # noqa: B017  (the server drops the handshake: no single error type)
        await connect(anonymous, "tls-test", connect_timeout_s=1)


def test_tls_settings_come_from_the_environment() -> None:
    s = Settings.from_env(
        {
            "DRAFLOW_NATS_TLS_CA": "/ca.pem",
            "DRAFLOW_NATS_TLS_CERT": "/c.pem",
            "DRAFLOW_NATS_TLS_KEY": "/c.key",
            "DRAFLOW_NATS_CREDS": "/x.nk",
        }
    )
    assert (s.tls_ca, s.tls_cert, s.tls_key, s.creds) == ("/ca.pem", "/c.pem", "/c.key", "/x.nk")
