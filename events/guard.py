"""Guard facts: who took and who released a guarded resource, on the resource's guard subject.

A guard subject (``<root>.ev.Guard.<scope>.<key>``, :func:`draflow.infra.guard.guard_subject`)
names one thing several deciders may hand out at once: a device, a counter set of a pool, a
node's numeric capacity. A decision that hands it out appends :class:`GuardTaken` there (in the
same atomic batch as the decision's own events, or, as the scheduler's PreBind does, as a single
append right before them), expecting the guard subject's last sequence the decision saw; a
second decider that saw the same state conflicts and decides again. :class:`GuardReleased` gives
back a take whose decision never landed; a deallocation writes none now (a take counts as given
back once its allocation was seen, ``draflow.services.scheduler.service.guard_heads``), while logs
written before have one in the batch of each ``ClaimDeallocated``.

The guard subjects order decisions; they do not count anything. What is allocated is still read
from the objects (the claims); a log written before guards existed simply has none.
"""

from __future__ import annotations

from draflow.events.envelope import Event

__all__ = ["GUARD_KIND", "GuardReleased", "GuardTaken"]

GUARD_KIND = "Guard"  # the subject's kind token: <root>.ev.Guard.<scope>.<key>


class GuardTaken(Event, frozen=True, kw_only=True):
    """``holder`` (``<Kind> <namespace>/<name>``, uid ``holder_uid``) was given the resource."""

    holder: str = ""
    holder_uid: str = ""


class GuardReleased(Event, frozen=True, kw_only=True):
    """``holder`` gave the resource back (its allocation was cleared)."""

    holder: str = ""
    holder_uid: str = ""
