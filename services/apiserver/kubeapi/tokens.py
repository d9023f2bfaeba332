"""Who may use the Kubernetes API: bearer tokens, one per user, in kube-apiserver's token file.

``$DRAFLOW_DATA_DIR/kubeapi/tokens.csv`` has kube-apiserver's ``--token-auth-file`` format, one
user a line: ``token,user,uid,"group1,group2"``. The apiserver creates it with the ``admin``
(``system:masters``); ``draflow token create|list|revoke`` adds and removes users, each with a
kubeconfig of their own. The server reads the file again whenever it changed, so a token works
(or stops working) at once, without a restart.
"""

from __future__ import annotations

import csv
import io
import os
import re
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ADMIN",
    "AUTHENTICATED",
    "MASTERS",
    "TOKENS_FILE",
    "TokenError",
    "TokenFile",
    "User",
    "add_user",
    "read_tokens",
    "remove_user",
    "write_private",
]

ADMIN = "admin"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
TOKENS_FILE = "tokens.csv"
# a user or group name: what fits in the token file and a kubeconfig without quoting surprises
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,252}$")


class TokenError(ValueError):
    """A user or group the token file cannot take, or a user that does (not) exist."""


@dataclass(frozen=True)
class User:
    name: str
    uid: str
    groups: tuple[str, ...]


def write_private(path: Path, data: bytes) -> None:
    """Write a secret readable by its owner only, atomically (a concurrent reader sees all or nothing)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_tokens(path: Path) -> list[tuple[str, User]]:
    """(token, user) per line; comments and lines without a user are skipped, as upstream."""
    out: list[tuple[str, User]] = []
    with path.open(newline="") as f:
        for row in csv.reader(f):
            if len(row) < 3 or row[0].startswith("#") or not row[0] or not row[1]:
                continue
            groups = tuple(g.strip() for g in (row[3] if len(row) > 3 else "").split(",") if g.strip())
            out.append((row[0].strip(), User(row[1].strip(), row[2].strip(), groups)))
    return out


def _write_tokens(path: Path, entries: list[tuple[str, User]]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    for token, user in entries:
        writer.writerow([token, user.name, user.uid, ",".join(user.groups)])
    write_private(path, buf.getvalue().encode())


def admin_line() -> bytes:
    return f'{secrets.token_urlsafe(32)},{ADMIN},{ADMIN},"{MASTERS},{AUTHENTICATED}"\n'.encode()


def check_name(what: str, name: str) -> None:
    if not _NAME.match(name):
        raise TokenError(
            f"{what} {name!r}: must start with a letter or digit and contain only letters, digits, "
            f"'.', '_', '@', ':' and '-' (at most 253 characters)"
        )


def add_user(directory: Path, name: str, groups: list[str]) -> tuple[str, User]:
    """A new random token for ``name`` (who must not have one); ``system:authenticated`` is
    added to the groups, as upstream's authenticator does."""
    check_name("user", name)
    if name.startswith("system:"):
        raise TokenError(f"user {name!r}: names starting with 'system:' are reserved for the system")
    for group in groups:
        check_name("group", group)
    path = directory / TOKENS_FILE
    if not path.exists():
        raise TokenError(f"{path} does not exist: start the apiserver with --kube-api once to create it")
    entries = read_tokens(path)
    if any(u.name == name for _, u in entries):
        raise TokenError(f'user "{name}" already has a token (draflow token revoke {name} first)')
    ordered = list(dict.fromkeys([*groups, AUTHENTICATED]))
    user = User(name, str(uuid.uuid4()), tuple(ordered))
    token = secrets.token_urlsafe(32)
    _write_tokens(path, [*entries, (token, user)])
    return token, user


def remove_user(directory: Path, name: str) -> None:
    if name == ADMIN:
        raise TokenError(
            f'user "{ADMIN}" is the administrator (the data dir\'s own kubeconfig); it is not revoked'
        )
    path = directory / TOKENS_FILE
    entries = read_tokens(path) if path.exists() else []
    kept = [(t, u) for t, u in entries if u.name != name]
    if len(kept) == len(entries):
        raise TokenError(f'user "{name}" has no token')
    _write_tokens(path, kept)


class TokenFile:
    """The token file as the server sees it: read again when its size or mtime changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._tokens: dict[str, User] = {}

    def tokens(self) -> dict[str, User]:
        try:
            st = self.path.stat()
        except OSError:
            self._stamp, self._tokens = None, {}
            return self._tokens
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp:
            self._tokens = {}
            for token, user in read_tokens(self.path):
                self._tokens.setdefault(token, user)
            self._stamp = stamp
        return self._tokens

    def authenticate(self, authorization: str) -> User | None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self.tokens().get(token.strip())
