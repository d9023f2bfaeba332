"""The node lifecycle controller's settings (kube-controller-manager's flags) and the time helpers
its pure deciders share.

Durations are written as Go writes them (``40s``, ``500ms``, ``1m30s``); a bare number means seconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from draflow.events.api.coordination_v1 import micro_time

__all__ = [
    "LifecycleConfig",
    "micro_time",
    "parse_duration",
    "parse_time",
    "rfc3339",
    "seconds",
]

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in a Go duration (``time.ParseDuration``: ``40s``, ``1m30s``, ``250ms``) or a number."""
    raw = text.strip()
    try:
        value = float(raw)
    except ValueError:
        pos, value = 0, 0.0
        if not raw:
            raise ValueError('invalid duration ""') from None
        while pos < len(raw):
            m = _PART.match(raw, pos)
            if m is None:
                raise ValueError(f'invalid duration "{text}"') from None
            value += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
    if value < 0:
        raise ValueError(f'invalid duration "{text}": must not be negative')
    return value


@dataclass(frozen=True)
class LifecycleConfig:
    """Upstream's defaults: a node silent for ``grace_period_s`` (``--node-monitor-grace-period``)
    is marked Unknown, checked every ``monitor_period_s`` (``--node-monitor-period``); a node that
    never posted status gets ``startup_grace_period_s`` from its creation. A zone with at least
    ``unhealthy_zone_threshold`` of its nodes not Ready (and more than two) is partially disrupted:
    while it has at most ``large_cluster_threshold`` nodes no new NoExecute taints are added there.
    Pod GC force-deletes pods of a node that does not exist once the pod is ``orphan_quarantine_s``
    old."""

    monitor_period_s: float = 5.0
    grace_period_s: float = 40.0
    startup_grace_period_s: float = 60.0
    unhealthy_zone_threshold: float = 0.55
    large_cluster_threshold: int = 50
    orphan_quarantine_s: float = 40.0


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 timestamp (seconds or MicroTime) as an aware datetime; None if absent or bad."""
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def rfc3339(t: datetime) -> str:
    """metav1.Time: second precision, UTC, ``Z``."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)
