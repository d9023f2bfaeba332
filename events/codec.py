"""JSON codec for envelopes: one msgspec pass on the hot path, upcasting on the slow path.

Decoding tries the tagged union of every event type (``events.union``, plus any registered there
explicitly) first: msgspec picks the class from ``data.type``. If that fails validation, or the
stored ``schema`` is older than the class's ``SCHEMA``, the event is decoded to a dict, upcast step
by step and converted. Unknown types raise :class:`UnknownEventType` (the consumer dead-letters
them).
"""

from __future__ import annotations

import datetime
from typing import Any, Union, cast

import msgspec

from events.envelope import Envelope, Event
from events.union import event_class, event_types, registry_version
from events.upcasters import UpcastError, upcast

__all__ = [
    "HDR_SCHEMA",
    "HDR_TYPE",
    "DecodeError",
    "UnknownEventType",
    "decode",
    "decode_many",
    "decode_raw",
    "encode",
    "make_envelope",
]

# Header names (NATS headers are case-sensitive on the wire; we write these spellings and read
# case-insensitively). traceparent is lower-case, as W3C Trace Context and OTel propagators write it.
HDR_TYPE = "Draflow-Type"
HDR_SCHEMA = "Draflow-Schema"
HDR_TRACEPARENT = "traceparent"


class DecodeError(ValueError):
    """A stored message is not a valid envelope for the current code: a poison event."""


class UnknownEventType(DecodeError):
    pass


_encoder = msgspec.json.Encoder()
_raw_decoder = msgspec.json.Decoder(Envelope[msgspec.Raw])
_union_cache: tuple[int, msgspec.json.Decoder[Any]] | None = None


def _union_decoder() -> msgspec.json.Decoder[Any]:
    global _union_cache
    version = registry_version()
    if _union_cache is None or _union_cache[0] != version:
        classes = tuple(event_types().values())
        # msgspec needs a Union of tagged Structs; a single class is its own "union".
        target: Any = Union[classes] if len(classes) > 1 else (classes[0] if classes else Event)  # noqa: UP007
        _union_cache = (version, msgspec.json.Decoder(Envelope[target]))
    return _union_cache[1]


def encode(env: Envelope[Any]) -> bytes:
    return _encoder.encode(env)


def make_envelope(
    event: Event,
    *,
    id: str,
    subject: str,
    time: datetime.datetime | None = None,
    correlation_id: str = "",
    causation_id: str = "",
    actor: str = "",
    traceparent: str = "",
) -> Envelope[Event]:
    cls = type(event)
    return Envelope(
        id=id,
        type=cls.type_name(),
        schema=cls.SCHEMA,
        subject=subject,
        time=time or datetime.datetime.now(datetime.UTC),
        data=event,
        correlation_id=correlation_id,
        causation_id=causation_id,
        actor=actor,
        traceparent=traceparent,
    )


def decode(payload: bytes, seq: int = 0) -> Envelope[Event]:
    """Decode a stored message into an envelope holding the current version of its event."""
    try:
        env: Envelope[Event] = _union_decoder().decode(payload)
    except msgspec.ValidationError:  # an older shape, or an unknown type: the slow path decides
        env = _slow_decode(payload)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"message {seq}: not JSON: {exc}") from None
    else:
        if env.schema < type(env.data).SCHEMA:
            env = _slow_decode(payload)
    if seq:
        msgspec.structs.force_setattr(env, "seq", seq)
    return env


def decode_many(items: list[tuple[bytes, int]]) -> list[Envelope[Event]]:
    """Decode (payload, seq) pairs: :func:`decode` with the per-call lookups hoisted (replays)."""
    dec = _union_decoder().decode
    setseq = msgspec.structs.force_setattr
    out: list[Envelope[Event]] = []
    append = out.append
    for payload, seq in items:
        try:
            env: Envelope[Event] = dec(payload)
            if env.schema < type(env.data).SCHEMA:
                raise msgspec.ValidationError("old schema")
        except msgspec.MsgspecError:
            append(decode(payload, seq))  # the slow path, with its errors
            continue
        setseq(env, "seq", seq)
        append(env)
    return out


def decode_raw(payload: bytes, seq: int = 0) -> Envelope[msgspec.Raw]:
    """Decode only the envelope, leaving ``data`` as raw JSON (for tools that print any event)."""
    try:
        env = _raw_decoder.decode(payload)
    except msgspec.MsgspecError as exc:
        raise DecodeError(f"message {seq}: not an envelope: {exc}") from None
    if seq:
        msgspec.structs.force_setattr(env, "seq", seq)
    return env


def _slow_decode(payload: bytes) -> Envelope[Event]:
    raw = decode_raw(payload)
    cls = event_class(raw.type)
    if cls is None:
        raise UnknownEventType(f"unknown event type {raw.type!r} (not in events.union)")
    try:
        data = msgspec.json.decode(raw.data)
        if not isinstance(data, dict):
            raise DecodeError(f"event {raw.type} {raw.id}: data must be an object")
        if raw.schema < cls.SCHEMA:
            data = upcast(raw.type, data, raw.schema, cls.SCHEMA)
        event = msgspec.convert(data, cls)
    except (msgspec.MsgspecError, UpcastError) as exc:
        raise DecodeError(f"event {raw.type} {raw.id} (schema {raw.schema}): {exc}") from None
    upcast_env: Any = msgspec.structs.replace(raw, data=event, schema=cls.SCHEMA)
    return cast(Envelope[Event], upcast_env)
