"""A tiny domain for the foundation tests: widgets that are created, resized and deleted."""

from __future__ import annotations

import msgspec

from events.envelope import Envelope, Event
from events.union import register_events
from projections.base import Projection


class WidgetCreated(Event, frozen=True, kw_only=True):
    name: str
    size: int = 0


class WidgetResized(Event, frozen=True, kw_only=True):
    size: int


class WidgetDeleted(Event, frozen=True, kw_only=True):
    pass


class WidgetExploded(Event, frozen=True, kw_only=True):
    """An event the projection's reducer refuses: a poison event for it."""

    reason: str = ""


register_events(WidgetCreated, WidgetResized, WidgetDeleted, WidgetExploded)


class Widget(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    size: int
    resizes: int = 0


def apply_widget(state: Widget | None, env: Envelope[Event]) -> Widget | None:
    d = env.data
    if isinstance(d, WidgetCreated):
        return Widget(name=d.name, size=d.size)
    if isinstance(d, WidgetResized):
        assert state is not None, "resize before create"
        return msgspec.structs.replace(state, size=d.size, resizes=state.resizes + 1)
    if isinstance(d, WidgetDeleted):
        return None
    if isinstance(d, WidgetExploded):
        raise ValueError(f"widget exploded: {d.reason}")
    return state


class Widgets(Projection[Widget]):
    name = "widgets"
    state_type = Widget
    subjects = ("Widget.*.*",)

    def apply(self, key: str, state: Widget | None, env: Envelope[Event]) -> Widget | None:
        return apply_widget(state, env)


class SizeTotals(Projection[dict]):
    """Total size per namespace: a second projection in the same transaction, keyed differently."""

    name = "size_totals"
    state_type = dict
    subjects = ("Widget.*.*",)

    def keys(self, env: Envelope[Event]) -> tuple[str, ...]:
        return (env.subject.split(".")[-2],)

    def apply(self, key: str, state: dict | None, env: Envelope[Event]) -> dict | None:
        d = env.data
        total = dict(state or {"total": 0, "events": 0})
        total["events"] += 1
        if isinstance(d, WidgetCreated | WidgetResized):
            total["total"] += d.size
        return total
