"""A directory watched with Linux inotify, as a wake-up for asyncio (upstream's watcher uses fsnotify).

Dependency-free: ``inotify_init1``/``inotify_add_watch`` through ``ctypes`` on libc, the fd read by
the event loop (``add_reader``). The events themselves are not interpreted: any change in the
directory (an entry created, deleted, moved, its attributes changed — ``sockets.link`` chmods a
socket once it listens) sets ``changed``, and the caller rescans the directory, which is the
source of truth. So a queue overflow (``IN_Q_OVERFLOW``) loses nothing, and the directory being
removed (``IN_IGNORED``) only needs the watch to be added again (``rearm``).

``DirectoryWatch.open`` returns None where inotify cannot be had (not Linux, no libc symbol, the
per-user instance or watch limit reached): the caller then falls back to scanning on a timer.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from pathlib import Path

__all__ = ["DirectoryWatch"]

log = logging.getLogger(__name__)

IN_ATTRIB = 0x00000004
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

MASK = IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1  # noqa: B018 - the symbol must exist
        libc.inotify_add_watch  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


class DirectoryWatch:
    """One inotify instance watching one directory; ``changed`` is set on every change in it."""

    def __init__(self, libc: ctypes.CDLL, fd: int, directory: Path) -> None:
        self._libc = libc
        self._fd = fd
        self.directory = directory
        self.changed = asyncio.Event()
        self._wd = -1
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def open(cls, directory: Path) -> DirectoryWatch | None:
        """Watch ``directory`` (it must exist); None when inotify is not available here."""
        libc = _libc()
        if libc is None:
            log.warning("inotify is not available; %s is scanned on a timer", directory)
            return None
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            log.warning(
                "inotify_init1: %s; %s is scanned on a timer", os.strerror(ctypes.get_errno()), directory
            )
            return None
        watch = cls(libc, fd, directory)
        if not watch.rearm():
            os.close(fd)
            return None
        watch._loop = asyncio.get_running_loop()
        watch._loop.add_reader(fd, watch._read)
        return watch

    def rearm(self) -> bool:
        """(Re)add the watch on the directory, e.g. after it was removed and made again."""
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(self.directory), MASK | IN_ONLYDIR)
        if wd < 0:
            log.warning(
                "inotify_add_watch %s: %s; scanned on a timer",
                self.directory,
                os.strerror(ctypes.get_errno()),
            )
            self._wd = -1
            return False
        self._wd = wd
        return True

    @property
    def armed(self) -> bool:
        """False once the directory itself went (its watch is gone until ``rearm``)."""
        return self._wd >= 0

    def _read(self) -> None:
        try:
            data = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return
        except OSError as exc:  # pragma: no cover - the fd is ours; only EINTR-like races
            if exc.errno != errno.EINTR:
                log.warning("inotify read: %s", exc)
            return
        offset = 0
        while offset + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            offset += _HEADER.size + length
            if mask & IN_IGNORED and wd == self._wd:
                self._wd = -1  # the directory was removed or moved: nothing more will come
        self.changed.set()

    def close(self) -> None:
        if self._fd < 0:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1
