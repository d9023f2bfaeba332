"""When a stream that answers it ends before a position is to be believed (a reset), and when not.

A stream with the same identity (creation time) that ends before what a process has applied was
shortened: restored from an older backup. In a replicated JetStream cluster one ``STREAM.INFO``
answer does not prove that: while a stream's leader is elected (a restarted server rejoining can
set one off) each member of a leaderless group answers with its own copy (``cluster.leader``
empty), and on a loaded machine an answer a moment old can lag by a message or more what a
replica already served the reader. So: a leaderless answer never counts; any other must go on
saying so for ``confirm_s`` before it is a reset. Until then the caller gets ``StoreUnavailable``
and asks again, as for a request nobody answered. Pure: no I/O, the clock handed in.
"""

from __future__ import annotations

from draflow.infra.errors import StoreUnavailable
from draflow.infra.reader import StreamStatus

__all__ = ["DEFAULT_CONFIRM_S", "Shortfall"]

DEFAULT_CONFIRM_S = 5.0


class Shortfall:
    def __init__(self, stream: str, confirm_s: float = DEFAULT_CONFIRM_S) -> None:
        self.stream = stream
        self.confirm_s = confirm_s
        self._since: float | None = None  # when answers started to end before the position

    def judge(self, status: StreamStatus, position: int, now: float) -> bool:
        """True: ``status`` (the same identity) ends before ``position`` and has said so long
        enough to be a reset. False: it does not end before it. ``StoreUnavailable``: not proven
        yet (a leaderless replica answered, or the shortfall is younger than ``confirm_s``)."""
        if status.last_seq >= position:
            self._since = None
            return False
        where = f"sequence {status.last_seq}, before position {position}"
        if status.leaderless:
            raise StoreUnavailable(
                f"stream {self.stream}: no leader (an election under way); a replica answered, at "
                f"{where}: asking again"
            )
        if self._since is None:
            self._since = now
        if now - self._since < self.confirm_s:
            raise StoreUnavailable(
                f"stream {self.stream}: an answer ends at {where} (a lagging copy?); asking again "
                f"for {self.confirm_s:g}s before calling it a reset"
            )
        return True
