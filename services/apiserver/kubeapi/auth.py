"""TLS and bearer tokens for the Kubernetes API, and the kubeconfig that holds both for kubectl.

On first start the server creates, under ``$DRAFLOW_DATA_DIR/kubeapi/``, a self-signed CA
(``ca.crt``/``ca.key``), a serving certificate for the listen address plus ``localhost`` and
``127.0.0.1`` signed by it, and ``tokens.csv`` in kube-apiserver's ``--token-auth-file`` format
(``token,user,uid,"group1,group2"``, ``kubeapi.tokens``) with one random token for the user
``admin`` (``system:masters``). It then writes ``$DRAFLOW_DATA_DIR/kubeconfig`` (cluster ``draflow``, the CA
embedded, the admin's token), so ``KUBECONFIG=$DRAFLOW_DATA_DIR/kubeconfig kubectl ...`` works.
Later starts reuse the CA and tokens (kubeconfigs handed out stay valid) and renew the serving
certificate when the address changed. Requests without a known token get 401 Unauthorized;
what a known user may do is ``kubeapi.authz``'s.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from draflow.services.apiserver.kubeapi.tokens import (
    ADMIN,
    TOKENS_FILE,
    TokenFile,
    User,
    admin_line,
    write_private,
)

__all__ = ["Credentials", "User", "kubeconfig", "load_or_create", "write_kubeconfig"]

CLUSTER = "draflow"
_VALID = datetime.timedelta(days=3650)
_write_private = write_private


@dataclass(frozen=True)
class Credentials:
    directory: Path
    ca_pem: bytes
    cert_file: Path
    key_file: Path
    token_file: TokenFile

    @property
    def tokens(self) -> dict[str, User]:
        return self.token_file.tokens()

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def token_of(self, user: str) -> str:
        return next(t for t, u in self.tokens.items() if u.name == user)

    def authenticate(self, authorization: str) -> User | None:
        return self.token_file.authenticate(authorization)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _create_ca(directory: Path) -> None:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "draflow-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write_private(directory / "ca.key", _key_pem(key))
    (directory / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _sans(host: str) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if host and host != "localhost":
            names.append(x509.DNSName(host))
    else:
        if not ip.is_unspecified and all(getattr(n, "value", None) != ip for n in names):
            names.append(x509.IPAddress(ip))
    return names


def _cert_covers(path: Path, host: str) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    have = {str(n.value) for n in san}
    return all(str(n.value) in have for n in _sans(host))


def _create_serving(directory: Path, host: str) -> None:
    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "draflow-kube-apiserver")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.SubjectAlternativeName(_sans(host)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(directory / "server.key", _key_pem(key))
    (directory / "server.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def load_or_create(directory: Path, host: str) -> Credentials:
    """The CA, serving certificate and tokens under ``directory`` (created on first use)."""
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "ca.crt").exists() or not (directory / "ca.key").exists():
        _create_ca(directory)
    if not _cert_covers(directory / "server.crt", host) or not (directory / "server.key").exists():
        _create_serving(directory, host)
    tokens = directory / TOKENS_FILE
    if not tokens.exists():
        _write_private(tokens, admin_line())
    return Credentials(
        directory=directory,
        ca_pem=(directory / "ca.crt").read_bytes(),
        cert_file=directory / "server.crt",
        key_file=directory / "server.key",
        token_file=TokenFile(tokens),
    )


def kubeconfig(ca_pem: bytes, server_url: str, user: str, token: str) -> dict[str, object]:
    """A kubeconfig with one cluster (the CA embedded), one user (its token) and one context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER,
                "cluster": {
                    "server": server_url,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": CLUSTER, "context": {"cluster": CLUSTER, "user": user}}],
        "current-context": CLUSTER,
        "preferences": {},
    }


def write_kubeconfig(creds: Credentials, server_url: str, path: Path, user: str = ADMIN) -> None:
    """Write (or refresh) a user's kubeconfig (the admin's by default): same content -> untouched."""
    config = kubeconfig(creds.ca_pem, server_url, user, creds.token_of(user))
    text = yaml.safe_dump(config, sort_keys=False).encode()
    try:
        if path.read_bytes() == text:
            return
    except OSError:
        pass
    _write_private(path, text)
