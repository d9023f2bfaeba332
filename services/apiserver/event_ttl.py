"""Kubernetes Events expire: after ``DRAFLOW_EVENT_TTL_S`` seconds (default 3600, the
kube-apiserver's ``--event-ttl``) since an Event last happened, the apiserver deletes it.

Without it every pod that ever ran would leave its Events (Scheduled, Started, ...) in every
process's object fold forever: memory and snapshots would grow with history although no pod is
left. Upstream, etcd drops them through a lease; here the apiserver appends ``KubeEventDeleted``
for each expired one (pipelined, each at the version it saw: an Event repeated meanwhile is left
for the next sweep). ``expired`` is the pure decision.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
from collections.abc import Iterable

from draflow.events.objects import EVENT_KIND, KubeEvent, KubeEventDeleted
from draflow.services.runtime.store import ApiStore

__all__ = ["DEFAULT_TTL_S", "EventExpiry", "expired", "ttl_from_env"]

log = logging.getLogger(__name__)

DEFAULT_TTL_S = 3600.0


def ttl_from_env(environ: dict[str, str] | None = None) -> float:
    env = os.environ if environ is None else environ
    return float(env.get("DRAFLOW_EVENT_TTL_S") or DEFAULT_TTL_S)


def _when(ev: KubeEvent) -> datetime.datetime | None:
    stamp = ev.last_timestamp or ev.first_timestamp or ev.metadata.creation_timestamp
    if not stamp:
        return None
    try:
        when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def expired(events: Iterable[KubeEvent], now: datetime.datetime, ttl_s: float) -> list[KubeEvent]:
    """The Events whose last occurrence is more than ``ttl_s`` before ``now`` (an Event with no
    readable time is kept: nothing says it is old)."""
    limit = now - datetime.timedelta(seconds=ttl_s)
    return [ev for ev in events if (when := _when(ev)) is not None and when < limit]


class EventExpiry:
    """Sweeps expired Events every ``every_s`` seconds (a tenth of the TTL, at most a minute)."""

    def __init__(self, store: ApiStore, ttl_s: float) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.every_s = min(60.0, max(0.05, ttl_s / 10))
        self.deleted = 0

    async def sweep(self) -> int:
        """Delete every expired Event now; how many were deleted."""
        now = datetime.datetime.now(datetime.UTC)
        old = expired(self.store.index.items(EVENT_KIND), now, self.ttl_s)  # type: ignore[arg-type]
        if not old:
            return 0
        requests = [
            (
                EVENT_KIND,
                ev.metadata.namespace,
                ev.metadata.name,
                [KubeEventDeleted()],
                int(ev.metadata.resource_version),
            )
            for ev in old
        ]
        outcomes = await self.store.append_many(requests)
        done = sum(1 for o in outcomes if not isinstance(o, BaseException))
        self.deleted += done
        log.info("expired %d Events older than %gs", done, self.ttl_s)
        return done

    async def run(self) -> None:
        if self.ttl_s <= 0:
            return  # 0: Events never expire
        while True:
            await asyncio.sleep(self.every_s)
            try:
                await self.sweep()
            except Exception:  # no log (yet), a timeout: the next sweep tries again
                log.exception("expiring Events failed")
