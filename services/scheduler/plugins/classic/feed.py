"""The scheduler shell's side of the classic plugin: feed it classic claims, carry out its asks.

:class:`ClassicFeed` is created by the scheduler's snapshot. It

* hands every classic claim change from the log to the plugin (``observe`` / ``forget``) and to
  the scheduling queue as a ``ResourceClaim`` addition without an old object, so pods waiting for
  one of their classic claims are requeued by the plugin's queueing hint (and other plugins'
  hints, which only know structured claims, see a claim they do not use);
* carries out the plugin's :class:`ClaimWrite` asks in background tasks (``ClaimAsks``): load the
  claim from its aggregate, :func:`apply_write` on that latest version, validate the status as the
  apiserver's status verb would (``validate_classic``) and append
  ``ClassicResourceClaimStatusUpdated`` with the version loaded as expected last sequence; a
  conflict reloads and decides again. Identical asks in flight are merged (an attempt repeated
  before the first write landed asks again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.envelope import Event
from draflow.events.objects import status_updated
from draflow.infra.eventstore import EventStore
from draflow.services.dra.classic.validation import validate_classic
from draflow.services.scheduler.framework.core import Scheduler
from draflow.services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from draflow.services.scheduler.plugins.claim_asks import ClaimAsks
from draflow.services.scheduler.plugins.classic.plugin import ClassicDynamicResources
from draflow.services.scheduler.plugins.classic.writes import ClaimWrite, apply_write

__all__ = ["CLASSIC_KINDS", "ClassicFeed"]

log = logging.getLogger(__name__)

CLASSIC_KINDS = frozenset({cv.CLAIM_KIND})


class ClassicFeed(ClaimAsks[ClaimWrite]):
    max_conflicts = 16

    def __init__(self, store: EventStore, core: Scheduler, wake: Callable[[], None]) -> None:
        super().__init__(store, wake)
        self.core = core
        plugins = [p for p in core.profile.plugins if isinstance(p, ClassicDynamicResources)]
        self.plugin = plugins[0] if plugins else None
        if self.plugin is not None:
            self.plugin.sink = self.submit

    def apply(self, kind: str, namespace: str, name: str, obj: object | None) -> None:
        """A classic object changed (``obj``) or was deleted (None)."""
        if self.plugin is None or kind != cv.CLAIM_KIND:
            return
        if obj is None:
            self.plugin.forget(namespace, name)
            return
        if isinstance(obj, cv.ResourceClaim):
            self.plugin.observe(obj)
            self.core.queue.on_event(ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.ADD, None, obj))

    def describe(self, w: ClaimWrite) -> str:
        return f"classic {w.op} of claim {w.namespace}/{w.name}"

    def decide(self, w: ClaimWrite, claim: cv.ResourceClaim) -> list[Event] | None:
        new = apply_write(claim, w)
        if isinstance(new, str):
            log.info("%s skipped: %s", self.describe(w), new)
            return None
        if new.status == claim.status:
            return None
        problems = validate_classic(new, claim)
        if problems:
            log.warning("%s invalid: %s", self.describe(w), problems)
            return None
        return [status_updated(cv.CLAIM_KIND, new.status)]
