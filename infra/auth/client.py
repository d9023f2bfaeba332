"""How a process finds its credential and TLS settings when it connects.

In order: ``DRAFLOW_NATS_CREDS`` (a file: an nkey seed, as ``auth/<role>.nk``, or a NATS ``.creds``
file with a user JWT, for servers run in operator mode); else, when the data dir holds the local
authority, the process's own role's seed ``$DRAFLOW_DATA_DIR/auth/<role>.nk`` (a kubelet of a new
node gets one made, ``draflow.infra.auth.authority.ensure_role``); else no credential (an open server, as
in most tests). TLS for remote servers: ``DRAFLOW_NATS_TLS_CA`` (the CA that signed the server's
certificate), ``DRAFLOW_NATS_TLS_CERT`` / ``DRAFLOW_NATS_TLS_KEY`` (a client certificate, for
servers that verify clients); a ``tls://`` URL or any of these turns TLS on.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Any

from draflow.infra.auth.authority import AuthorityError, creds_path, ensure_role, has_authority, public_key
from draflow.infra.auth.roles import inbox_prefix, node_of
from draflow.infra.config import Settings

__all__ = ["auth_options", "credential_for"]

_JWT_SEED = re.compile(rb"-{3,}BEGIN USER NKEY SEED-{3,}\s*(\S+)\s*-{3,}END USER NKEY SEED")


def credential_for(settings: Settings, role: str) -> Path | None:
    """The credential file this process connects with (None: connect without one)."""
    if settings.creds:
        path = Path(settings.creds)
        if not path.is_file():
            raise AuthorityError(f"DRAFLOW_NATS_CREDS={settings.creds}: no such file")
        return path
    if not role or not has_authority(settings):
        return None
    path = creds_path(settings, role)
    if path.is_file():
        return path
    if node_of(role) is not None:
        return ensure_role(settings, role)
    raise AuthorityError(
        f"no credential for {role!r} in {path.parent} (this system requires one): set DRAFLOW_NATS_CREDS"
    )


def _seed_of(path: Path) -> tuple[bytes, bool]:
    """The nkey seed in a credential file, and whether the file is a JWT ``.creds`` file."""
    data = path.read_bytes()
    found = _JWT_SEED.search(data)
    if found:
        return found.group(1), True
    return data.strip(), False


def _tls_context(settings: Settings) -> ssl.SSLContext | None:
    if not (settings.tls_ca or settings.tls_cert or "tls://" in settings.nats_url):
        return None
    ctx = ssl.create_default_context(cafile=settings.tls_ca or None)
    if settings.tls_cert:
        ctx.load_cert_chain(settings.tls_cert, settings.tls_key or None)
    return ctx


def auth_options(settings: Settings, role: str) -> dict[str, Any]:
    """nats-py ``connect`` options: the credential, an inbox of this credential's own, TLS."""
    opts: dict[str, Any] = {}
    path = credential_for(settings, role)
    if path is not None:
        seed, is_jwt = _seed_of(path)
        if is_jwt:
            opts["user_credentials"] = str(path)
        else:
            opts["nkeys_seed"] = str(path)
        try:
            opts["inbox_prefix"] = inbox_prefix(public_key(seed))
        except Exception as exc:  # nkeys raises its own error types for a damaged seed
            raise AuthorityError(f"credential {path}: not an nkey seed ({exc!r})") from None
    ctx = _tls_context(settings)
    if ctx is not None:
        opts["tls"] = ctx
    return opts
