"""Error classes shared by the store, consumers and sagas: what is worth retrying and what is not."""

from __future__ import annotations

__all__ = [
    "AppendError",
    "ConcurrencyError",
    "EventStoreError",
    "PermanentError",
    "PoisonEvent",
    "StoreUnavailable",
    "StreamReset",
    "TransientError",
]


class TransientError(Exception):
    """The same call may succeed later (timeouts, a restarting server): retry with backoff."""


class PermanentError(Exception):
    """Retrying cannot help: compensate, dead-letter or report."""


class PoisonEvent(PermanentError):
    """An event a consumer can never handle: it is terminated and lands in the dead-letter stream."""


class EventStoreError(Exception):
    """Base of the event store's errors."""


class ConcurrencyError(EventStoreError):
    """Someone else changed the aggregate since ``expected_last_seq``: reload and decide again."""

    def __init__(self, subject: str, expected_last_seq: int) -> None:
        super().__init__(f"{subject}: expected last sequence {expected_last_seq}, the aggregate has moved on")
        self.subject = subject
        self.expected_last_seq = expected_last_seq


class AppendError(EventStoreError, PermanentError):
    """JetStream refused an append for a reason other than a conflict (code/err_code from the server)."""

    def __init__(self, subject: str, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{subject}: append refused ({code}/{err_code}): {description}")
        self.code = code
        self.err_code = err_code


class StoreUnavailable(EventStoreError, TransientError):
    """No answer from JetStream (timeout, reconnecting, no responders): worth retrying."""


class StreamMissing(StoreUnavailable):
    """The stream does not exist (not yet created, or deleted)."""


class StreamReset(EventStoreError):
    """The stream is no longer the log this process has been following: it was deleted (and
    maybe created again: another identity, its creation time), or it ends before the position
    this process has applied. Every position and every state folded from the old log is
    meaningless now: stop, or rebuild from sequence 1 of the new stream. Never retried."""

    def __init__(
        self, stream: str, position: int, last_seq: int, old_identity: str, new_identity: str
    ) -> None:
        if not new_identity:
            why = "it was deleted (restore it from a backup: draflow restore FILE, docs/reliability.md)"
        elif old_identity != new_identity:
            why = f"it was created again ({old_identity} -> {new_identity})"
        else:
            why = "it ends before that position"
        super().__init__(
            f"stream {stream} was reset: this process has applied it up to sequence {position}, "
            f"the stream now ends at sequence {last_seq}; {why}"
        )
        self.stream = stream
        self.position = position
        self.last_seq = last_seq
        self.old_identity = old_identity
        self.new_identity = new_identity


class HistoryUnavailable(EventStoreError):
    """A read asked for events older than any retained history: they were moved out of the
    stream into archive segments that this process cannot find (or that were removed). Names
    the oldest sequence that can still be read."""

    def __init__(self, asked: int, oldest: int, where: str) -> None:
        super().__init__(
            f"events before sequence {oldest} are not retained: asked from sequence {asked}, the "
            f"oldest available is {oldest} (stream plus archive at {where}); the log starts with "
            "a snapshot plus everything since (docs/history.md)"
        )
        self.asked = asked
        self.oldest = oldest
