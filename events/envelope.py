"""Events and the envelope that carries them through the log.

An event is a past-tense fact: a frozen msgspec Struct deriving from :class:`Event`, tagged by its
type name (the ``type`` tag, the class name unless ``tag=`` says otherwise) and carrying a schema
version (``SCHEMA``); both also travel in the envelope and in the NATS headers. The tagged union of
every event type draflow writes is assembled in one module, :mod:`events.union`. Changing an
event's shape means bumping ``SCHEMA`` and registering an upcaster (``events.upcasters``); stored
events are never rewritten.

The envelope holds what the log needs to know about an event besides its content: a unique
(deterministic where retries must not duplicate) ``id``, the aggregate ``subject``, ``time``,
``correlation_id`` (the saga or request it belongs to), ``causation_id`` (the event that caused it),
``actor`` (the service) and the W3C ``traceparent``. ``seq`` is the stream sequence: filled in when
an event is read back from the log, never written.
"""

from __future__ import annotations

import datetime
from typing import ClassVar, Generic, TypeVar

import msgspec

__all__ = ["Envelope", "Event"]


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag=True, gc=False):
    """Base of every event. Subclass it (past-tense, domain-named) and list it in ``events.union``.

    ``gc=False`` (inherited): events are immutable data that never form reference cycles, so the
    cyclic garbage collector need not track them; replaying a long log is much faster for it.
    """

    SCHEMA: ClassVar[int] = 1

    @classmethod
    def type_name(cls) -> str:
        tag = cls.__struct_config__.tag
        assert isinstance(tag, str)
        return tag


E = TypeVar("E")


class Envelope(msgspec.Struct, Generic[E], frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """An event with its log metadata, exactly as stored (JSON) in the stream."""

    id: str
    type: str
    schema: int
    subject: str
    time: datetime.datetime
    data: E
    correlation_id: str = ""
    causation_id: str = ""
    actor: str = ""
    traceparent: str = ""
    # Stream sequence (the event's position and the aggregate's version); set on read, never sent.
    seq: int = 0
