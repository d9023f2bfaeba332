"""Where the kubelet and its plugins meet on disk, and unix sockets that fit there.

Layout, mirroring ``/var/lib/kubelet``: a kubelet of node N watches
``$DRAFLOW_DATA_DIR/kubelet/N/plugins_registry/`` for registration sockets; a DRA driver's plugin
serves its node service on ``$DRAFLOW_DATA_DIR/kubelet/N/plugins/<driver>/dra.sock``.

A unix socket path holds at most 107 bytes. A deeper data dir still works: the socket is bound in
the system's temp dir (``draflow-<hash of the path>.sock``, the same every start) and the long path
is a symlink to it; whoever dials a path resolves the link first (``dial_address``). A path that is
neither a socket nor our link is never removed.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

__all__ = [
    "MAX_SOCKET_PATH",
    "SocketPathError",
    "bind",
    "dial_address",
    "dra_socket",
    "link",
    "plugins_dir",
    "registration_socket",
    "registry_dir",
    "release",
]

MAX_SOCKET_PATH = 107  # sockaddr_un.sun_path holds 108 bytes with the terminating NUL
REGISTRATION_SUFFIX = "-reg.sock"


class SocketPathError(ValueError):
    """The socket cannot be placed at that path."""


def registry_dir(data_dir: Path, node: str) -> Path:
    """The directory a kubelet watches for plugin registration sockets."""
    return data_dir / "kubelet" / node / "plugins_registry"


def plugins_dir(data_dir: Path, node: str) -> Path:
    """Where plugins keep their own sockets and state (``/var/lib/kubelet/plugins``)."""
    return data_dir / "kubelet" / node / "plugins"


def registration_socket(registry: Path, driver: str, instance: str = "") -> Path:
    """``<driver>-reg.sock``, or ``<driver>-<instance>-reg.sock`` for one of several instances
    (a rolling update, as upstream's ``RollingUpdate`` option names them)."""
    return registry / (
        f"{driver}-{instance}{REGISTRATION_SUFFIX}" if instance else f"{driver}{REGISTRATION_SUFFIX}"
    )


def dra_socket(plugins: Path, driver: str, instance: str = "") -> Path:
    """The endpoint a plugin advertises: ``<driver>/dra.sock`` (``dra-<instance>.sock``)."""
    return plugins / driver / (f"dra-{instance}.sock" if instance else "dra.sock")


def _too_long(path: Path) -> bool:
    return len(os.fsencode(path)) > MAX_SOCKET_PATH


def _short(path: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(path.absolute())).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"draflow-{digest}.sock"


def _clear(path: Path) -> None:
    if not (path.exists() or path.is_symlink()):
        return
    mode = path.lstat().st_mode
    if not (stat.S_ISSOCK(mode) or stat.S_ISLNK(mode)):
        raise SocketPathError(f"socket path {path} exists and is not a socket")
    path.unlink()


def bind(path: Path) -> str:
    """Prepare ``path`` for a server: clear what a killed process left there, and return the
    ``unix:`` address to listen on (a short one, linked from ``path``, when ``path`` is too long:
    call ``link`` once the server listens)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _clear(path)
    target = _short(path) if _too_long(path) else path
    if target != path:
        _clear(target)
    return f"unix:{target}"


def link(path: Path, address: str) -> None:
    """After the server listens on ``address``: make ``path`` lead to it (and owner-only)."""
    target = Path(address.removeprefix("unix:"))
    os.chmod(target, 0o600)
    if target != path:
        path.symlink_to(target)


def release(path: Path) -> None:
    """Remove a server's socket (and its short target) after it stopped."""
    try:
        target = path.resolve() if path.is_symlink() else path
        for p in {path, target}:
            if p.is_symlink() or (p.exists() and stat.S_ISSOCK(p.lstat().st_mode)):
                p.unlink()
    except FileNotFoundError:
        pass


def dial_address(path: Path) -> str:
    """The ``unix:`` address a client dials for ``path`` (a link is followed)."""
    target = Path(os.path.realpath(path))
    if _too_long(target):
        raise SocketPathError(
            f"socket path {target} is {len(os.fsencode(target))} bytes; a unix socket path may have "
            f"at most {MAX_SOCKET_PATH}"
        )
    return f"unix:{target}"
