"""The scheduler shell's side of the numeric plugin: feed its books, write its claim conditions.

:class:`NumericFeed` is created by the scheduler's snapshot. It hands every ResourceClass,
NodeResourceCapacity, classic claim and vendor parameter object change from the log to the
plugin's books, keeps the capacity ledgers' versions (the saga's over-commit guard), and tells the
scheduling queue that numeric inputs changed (``EventResource.NUMERIC``), so pods the plugin
rejected are tried again. Vendor parameter objects are of kinds draflow does not serve itself
(CustomResourceDefinitions): the snapshot offers every subject of an unknown kind here
(:meth:`wants`), and the books index whatever object the shared fold makes of it by the
``apiVersion``, ``kind``, namespace and name it carries.

The plugin's condition asks (a template that cannot map a claim's parameters) are appended in
background tasks (``ClaimAsks``) as ``NumericClaimConditionRecorded`` at the claim's version;
identical asks in flight are merged and a claim that changed is decided again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import msgspec

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api.registry import resource_types
from draflow.events.numeric import NumericClaimConditionRecorded
from draflow.infra.eventstore import EventStore
from draflow.projections.objects import ObjectIndex
from draflow.services.dra.numeric.plans import LEDGER_KIND, ledger_name, parse_ledger_name
from draflow.services.scheduler.framework.core import Scheduler
from draflow.services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from draflow.services.scheduler.plugins.claim_asks import ClaimAsks
from draflow.services.scheduler.plugins.numeric.plugin import ConditionAsk, NumericResources

__all__ = ["NUMERIC_KINDS", "NumericFeed"]

NUMERIC_KINDS = frozenset({cv.CLASS_KIND, nv.KIND, cv.CLAIM_KIND, LEDGER_KIND})
# subjects of kinds that are never parameter objects
_NOT_PARAMETERS = frozenset({"Saga", "Event", "PodSchedulingContext"})
_CHANGED = ClusterEvent(EventResource.NUMERIC, ActionType.UPDATE_OTHER)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NumericFeed(ClaimAsks[ConditionAsk]):
    def __init__(self, store: EventStore, core: Scheduler, wake: Callable[[], None]) -> None:
        super().__init__(store, wake)
        self.core = core
        plugins = [p for p in core.profile.plugins if isinstance(p, NumericResources)]
        self.plugin = plugins[0] if plugins else None
        if self.plugin is not None:
            self.plugin.sink = self.submit
        # the built-in kinds (a CustomResourceDefinition's kind is a possible parameter object)
        self._served = frozenset(rt.kind for rt in resource_types() if not rt.crd)

    def wants(self, kind: str) -> bool:
        """Whether a subject of this kind token feeds the books (numeric kinds, parameter objects)."""
        if self.plugin is None:
            return False
        return kind in NUMERIC_KINDS or (kind not in self._served and kind not in _NOT_PARAMETERS)

    def apply(self, kind: str, namespace: str, name: str, obj: object | None, seq: int) -> None:
        """An object changed (``obj``) or was deleted (None) at stream sequence ``seq``."""
        if self.plugin is None:
            return
        books = self.plugin.books
        if kind == LEDGER_KIND:
            pair = parse_ledger_name(name)
            if pair is not None:
                books.ledger_versions[pair] = seq
            return
        if kind == cv.CLASS_KIND:
            if isinstance(obj, cv.ResourceClass):
                books.upsert_class(obj)
            else:
                books.delete_class(name)
        elif kind == nv.KIND:
            if isinstance(obj, nv.NodeResourceCapacity):
                books.upsert_capacity(obj)
            else:
                books.delete_capacity(name)
        elif kind == cv.CLAIM_KIND:
            if isinstance(obj, cv.ResourceClaim):
                books.upsert_claim(obj)
            else:
                books.delete_claim(namespace, name)
        elif obj is None:
            books.delete_param(kind, namespace, name)
        elif books.upsert_param(obj) is None:
            return
        self.core.queue.on_event(_CHANGED)

    def restore_ledgers(self, index: ObjectIndex) -> None:
        """After a start from a snapshot: the ledger versions of every (node, driver) that
        publishes capacity (the snapshot keeps every subject's version)."""
        if self.plugin is None:
            return
        books = self.plugin.books
        for cap in books.capacities.values():
            pair = (cap.node_name, cap.driver_name)
            version = index.version(LEDGER_KIND, "", ledger_name(*pair))
            if version:
                books.ledger_versions[pair] = version

    # -- claim conditions -------------------------------------------------------------------------
    def describe(self, ask: ConditionAsk) -> str:
        return f"condition of numeric claim {ask.namespace}/{ask.name}"

    def decide(self, ask: ConditionAsk, claim: cv.ResourceClaim) -> NumericClaimConditionRecorded | None:
        if ask.uid and claim.metadata.uid != ask.uid:
            return None
        if claim.status.numeric_allocation is not None:
            return None  # allocated meanwhile: the condition no longer applies
        current = next((c for c in claim.status.conditions if c.type == ask.condition.type), None)
        if current is not None and current.message == ask.condition.message:
            return None
        return NumericClaimConditionRecorded(
            condition=msgspec.structs.replace(ask.condition, last_transition_time=_now())
        )
