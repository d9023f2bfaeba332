"""Which Events have expired (pure); the sweep on a real server is in tests/services/test_memory_bound.py."""

from __future__ import annotations

import datetime

from draflow.events.api.meta import ObjectMeta
from draflow.events.objects import KubeEvent
from draflow.services.apiserver.event_ttl import DEFAULT_TTL_S, expired, ttl_from_env

NOW = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.UTC)


def event(name: str, last: str | None = None, first: str | None = None, created: str = "") -> KubeEvent:
    meta = ObjectMeta(name=name, namespace="default", creation_timestamp=created)
    return KubeEvent(metadata=meta, last_timestamp=last, first_timestamp=first)


def test_an_event_expires_a_ttl_after_it_last_happened() -> None:
    events = [
        event("old", last="2026-11-29T10:59:59Z"),
        event("repeated", first="2026-11-29T09:00:00Z", last="2026-11-29T11:30:00Z"),
        event("first-only", first="2026-11-29T10:00:00Z"),
        event("created-only", created="2026-11-29T10:00:00Z"),
        event("no-time"),
        event("unreadable", last="yesterday"),
    ]
    assert [e.metadata.name for e in expired(events, NOW, 3600)] == ["old", "first-only", "created-only"]
    assert expired(events, NOW, 7 * 3600) == []


def test_the_ttl_comes_from_the_environment() -> None:
    assert ttl_from_env({}) == DEFAULT_TTL_S == 3600
    assert ttl_from_env({"DRAFLOW_EVENT_TTL_S": "90"}) == 90
