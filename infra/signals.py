"""SIGTERM/SIGINT handling shared by every service process.

honcho starts every process at once and may stop them just as quickly: a SIGTERM that arrives while
a service is still importing its modules would kill it with the default action (exit -15) before
its event loop could install a handler, and a Ctrl-C would print a ``KeyboardInterrupt``
traceback. ``install_early`` (called first thing by each service's ``__main__`` when it runs,
before its imports; importing a package never installs it) records such a signal instead, and
``stop_on_signals`` turns a recorded one into an immediate, clean stop once the loop runs.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from types import FrameType

__all__ = ["install_early", "stop_on_signals"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_received: list[int] = []


def _record(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)


def install_early() -> None:
    """Record SIGTERM and SIGINT until the event loop takes over: Ctrl-C in the terminal running
    ``honcho start`` reaches every process at once, some of them still importing, and must stop
    them as quietly as honcho's SIGTERM (no ``KeyboardInterrupt`` traceback)."""
    if threading.current_thread() is threading.main_thread():
        for sig in _SIGNALS:
            signal.signal(sig, _record)


def stop_on_signals(loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Event:
    """An event set by SIGTERM/SIGINT, and set at once if one arrived during start-up."""
    loop = loop or asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in _SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    if _received:
        stop.set()
    return stop
