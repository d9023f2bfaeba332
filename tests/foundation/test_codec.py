"""Envelope, tagged union, upcasters and subject tokens."""

from __future__ import annotations

import datetime
from typing import ClassVar

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.codec import DecodeError, UnknownEventType, decode, decode_raw, encode, make_envelope
from events.envelope import Event
from events.subjects import aggregate_subject, decode_token, encode_token, parse_subject
from events.union import EVENT_TYPES, event_class, event_types, register_events
from events.upcasters import UpcastError, upcaster
from infra.eventstore import EventStore
from tests.foundation import model
from tests.foundation.model import WidgetCreated, WidgetResized


class GadgetCalibrated(Event, frozen=True, kw_only=True):
    """Schema 2: ``offset_milli`` (int, thousandths) replaced v1's ``offset`` (float)."""

    SCHEMA: ClassVar[int] = 2
    gadget: str
    offset_milli: int
    note: str = ""


register_events(GadgetCalibrated)


@upcaster("GadgetCalibrated", from_version=1)
def _gadget_v1_to_v2(data: dict) -> dict:
    data["offset_milli"] = round(data.pop("offset") * 1000)
    return data


# What a schema-1 service wrote, byte for byte (stored events are never rewritten).
OLD_GADGET_EVENT = (
    b'{"id":"e-old-1","type":"GadgetCalibrated","schema":1,"subject":"SUBJECT",'
    b'"time":"2025-01-02T03:04:05.123456Z","data":{"type":"GadgetCalibrated","gadget":"g1","offset":0.25},'
    b'"correlation_id":"c-1","actor":"gadget-service-v1"}'
)


def test_events_are_a_tagged_union_registered_by_name() -> None:
    assert event_class("WidgetCreated") is WidgetCreated
    assert WidgetCreated.type_name() == "WidgetCreated" and GadgetCalibrated.SCHEMA == 2
    env = make_envelope(WidgetCreated(name="w", size=3), id="e1", subject="draflow.ev.Widget.d.w", actor="a")
    wire = encode(env)
    raw = msgspec.json.decode(wire)
    assert raw["type"] == "WidgetCreated" and raw["schema"] == 1 and raw["data"]["type"] == "WidgetCreated"
    assert "seq" not in raw  # the position is the stream's, never written
    back = decode(wire, seq=42)
    assert back.data == WidgetCreated(name="w", size=3) and back.seq == 42 and back.actor == "a"
    assert msgspec.structs.replace(back, seq=0) == env
    with pytest.raises(AttributeError):
        back.data.size = 4  # type: ignore[misc]  # frozen


def test_event_types_must_be_unique() -> None:
    class WidgetCreated(Event, frozen=True, kw_only=True):  # same type name as the model's, another class
        other: int = 0

    with pytest.raises(TypeError, match="already registered"):
        register_events(WidgetCreated)
    assert event_class("WidgetCreated") is model.WidgetCreated  # the original stays registered
    with pytest.raises(TypeError, match="already registered"):  # nor can a test shadow draflow's own
        register_events(type("PodBound", (Event,), {}, frozen=True, kw_only=True))


def test_every_event_type_is_in_the_union_and_nothing_registers_itself() -> None:
    """``events.union`` is the one list: defining an Event subclass registers nothing."""

    class Unlisted(Event, frozen=True, kw_only=True):
        pass

    assert event_class("Unlisted") is None
    with pytest.raises(UnknownEventType):
        decode(encode(make_envelope(Unlisted(), id="e", subject="draflow.ev.X._.x")))
    names = [cls.type_name() for cls in EVENT_TYPES]
    assert len(names) == len(set(names))
    assert {"ClaimAllocated", "PodBound", "SagaStarted", "PodApplied", "KubeEventRecorded"} <= set(names)
    assert set(names) <= set(event_types())


def test_upcaster_reads_old_schema() -> None:
    env = decode(OLD_GADGET_EVENT.replace(b"SUBJECT", b"draflow.ev.Gadget._.g1"), seq=7)
    assert env.data == GadgetCalibrated(gadget="g1", offset_milli=250)
    assert env.schema == 2 and env.seq == 7 and env.actor == "gadget-service-v1"
    assert env.time == datetime.datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=datetime.UTC)


def test_decode_errors_are_typed() -> None:
    with pytest.raises(DecodeError):
        decode(b"not json")
    with pytest.raises(UnknownEventType):
        decode(
            b'{"id":"x","type":"NeverHeardOf","schema":1,"subject":"s","time":"2025-01-01T00:00:00Z",'
            b'"data":{"type":"NeverHeardOf"}}'
        )
    with pytest.raises(DecodeError):  # the current schema, but the wrong shape
        decode(
            b'{"id":"x","type":"WidgetResized","schema":1,"subject":"s","time":"2025-01-01T00:00:00Z",'
            b'"data":{"type":"WidgetResized","size":"big"}}'
        )
    old_without_step = OLD_GADGET_EVENT.replace(b'"schema":1', b'"schema":0')
    with pytest.raises(DecodeError, match="no upcaster"):
        decode(old_without_step)
    assert issubclass(UpcastError, Exception)
    assert decode_raw(OLD_GADGET_EVENT).data == msgspec.Raw(
        b'{"type":"GadgetCalibrated","gadget":"g1","offset":0.25}'
    )


async def test_stored_old_event_is_upcast_on_load(event_store: EventStore) -> None:
    """An event written by an old service version sits in the stream; loading yields the current shape."""
    subject = event_store.subject("Gadget", None, "g1")
    payload = OLD_GADGET_EVENT.replace(b"SUBJECT", subject.encode())
    ack = await event_store.js.publish(
        subject,
        payload,
        headers={"Nats-Msg-Id": "e-old-1", "Draflow-Type": "GadgetCalibrated", "Draflow-Schema": "1"},
    )
    await event_store.append(
        subject, GadgetCalibrated(gadget="g1", offset_milli=300), expected_last_seq=ack.seq
    )
    events = await event_store.events(subject)
    assert [e.data for e in events] == [
        GadgetCalibrated(gadget="g1", offset_milli=250),
        GadgetCalibrated(gadget="g1", offset_milli=300),
    ]
    assert [e.schema for e in events] == [2, 2]


@given(st.text(alphabet=st.characters(exclude_characters=" \t\r\n*>~"), min_size=1))
def test_subject_tokens_are_reversible(name: str) -> None:
    token = encode_token(name)
    assert "." not in token and decode_token(token) == name


def test_subjects() -> None:
    s = aggregate_subject("ResourceClaim", "default", "gpu.claim-1")
    assert s == "draflow.ev.ResourceClaim.default.gpu~claim-1"
    assert parse_subject(s) == ("ResourceClaim", "default", "gpu.claim-1")
    cluster = aggregate_subject("DeviceClass", None, "gpu.example.com")
    assert cluster == "draflow.ev.DeviceClass._.gpu~example~com"
    assert parse_subject(cluster) == ("DeviceClass", None, "gpu.example.com")
    for bad in ("a b", "x*", "a>b", "til~de", ""):
        with pytest.raises(ValueError):
            encode_token(bad)
    with pytest.raises(ValueError):
        parse_subject("draflow.ev.Only.two")
    assert WidgetResized(size=1) != WidgetResized(size=2)
