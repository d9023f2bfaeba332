"""Events and the envelope that carries them through the log.

An event is a past-tense fact: a frozen msgspec Struct deriving from :class:`Event`. Every subclass
joins a tagged union keyed by its type name (the ``type`` tag, the class name unless ``tag=`` says
otherwise) and carries a schema version (``SCHEMA``); both also travel in the envelope and in the
NATS headers. Changing an event's shape means bumping ``SCHEMA`` and registering an upcaster
(``events.upcasters``); stored events are never rewritten.

The envelope holds what the log needs to know about an event besides its content: a unique
(deterministic where retries must not duplicate) ``id``, the aggregate ``subject``, ``time``,
``correlation_id`` (the saga or request it belongs to), ``causation_id`` (the event that caused it),
``actor`` (the service) and the W3C ``traceparent``. ``seq`` is the stream sequence: filled in when
an event is read back from the log, never written.
"""

from __future__ import annotations

import datetime
from typing import Any, ClassVar, Generic, TypeVar

import msgspec

__all__ = ["Envelope", "Event", "event_class", "event_types", "registry_version"]


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag=True, gc=False):
    """Base of every event. Subclass it (past-tense, domain-named) and the type registers itself.

    ``gc=False`` (inherited): events are immutable data that never form reference cycles, so the
    cyclic garbage collector need not track them; replaying a long log is much faster for it.
    """

    SCHEMA: ClassVar[int] = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register(cls)

    @classmethod
    def type_name(cls) -> str:
        tag = cls.__struct_config__.tag
        assert isinstance(tag, str)
        return tag


E = TypeVar("E")

_REGISTRY: dict[str, type[Event]] = {}
# msgspec finalises a Struct's config (its tag) only after __init_subclass__ has run, so classes
# are queued there and registered on the next registry lookup.
_PENDING: list[type[Event]] = []
_version = 0


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _register(cls: type[Event]) -> None:
    global _version
    _PENDING.append(cls)
    _version += 1


def _flush() -> None:
    while _PENDING:
        cls = _PENDING.pop(0)
        name = cls.type_name()
        existing = _REGISTRY.get(name)
        if existing is not None and _qualified(existing) != _qualified(cls):
            raise TypeError(f"event type {name!r} is already registered by {_qualified(existing)}")
        if not isinstance(cls.SCHEMA, int) or cls.SCHEMA < 1:
            raise TypeError(f"event type {name!r}: SCHEMA must be an int >= 1")
        _REGISTRY[name] = cls


def event_class(type_name: str) -> type[Event] | None:
    """The registered class for a type name (None if no imported module defines it)."""
    if _PENDING:
        _flush()
    return _REGISTRY.get(type_name)


def event_types() -> dict[str, type[Event]]:
    _flush()
    return dict(_REGISTRY)


def registry_version() -> int:
    """Bumped on every registration, so cached union decoders know when to rebuild."""
    return _version


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
