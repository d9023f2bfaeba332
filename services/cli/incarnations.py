"""A pod's incarnations: the same namespace/name created, deleted and created again (a new uid).

``draflow explain pod NAME`` explains the pod that has (or last had) that name; earlier pods of the
same name are other objects and show only as history. Everything is keyed by **uid**: the pod's
own events are split where a creation follows a deletion on its subject; a saga belongs to the pod
whose uid its input names (older sagas without one: to the pod that existed when it started); a
Kubernetes Event to the uid of its involved object; a claim to the pod that owns it (owner uid),
whose saga touched it, that it was reserved for, or that names it in spec or status while both
existed. Pure: takes decoded envelopes, returns the partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from draflow.events.api.core_v1 import Pod
from draflow.events.dra import ClaimAllocated, ClaimDeallocated, ClaimReserved
from draflow.events.envelope import Envelope, Event
from draflow.events.numeric import NumericClaimAllocated, NumericClaimDeallocated, NumericClaimReserved
from draflow.projections.objects import fold
from draflow.services.dra.classic.podclaims import pod_claim_refs
from draflow.services.dra.resourceclaim import named_claims

__all__ = [
    "ClaimLife",
    "Incarnation",
    "claim_events_for",
    "claim_lives",
    "names_of",
    "owner_of_seq",
    "split_pod",
]

Env = Envelope[Event]


class Incarnation(msgspec.Struct, kw_only=True):
    """One pod object: its uid, where it starts and ends in the log, what it went through."""

    uid: str
    first_seq: int
    deleted_seq: int = 0  # 0 = it still exists (at the explained point of the log)
    pod: Pod | None = None  # its last state (also after deletion)
    events: list[Env] = msgspec.field(default_factory=list)

    def contains(self, seq: int) -> bool:
        return seq >= self.first_seq and (not self.deleted_seq or seq <= self.deleted_seq)


class ClaimLife(msgspec.Struct, kw_only=True):
    """One claim object (a name re-used by a later claim is another life)."""

    name: str
    uid: str
    first_seq: int
    deleted_seq: int = 0
    owner_uids: tuple[str, ...] = ()  # uids of the Pods that own it
    events: list[Env] = msgspec.field(default_factory=list)

    def overlaps(self, inc: Incarnation) -> bool:
        end = self.deleted_seq or float("inf")
        inc_end = inc.deleted_seq or float("inf")
        return self.first_seq <= inc_end and inc.first_seq <= end


def _lives(envs: Iterable[Env], start: Callable[[Any, Env], Any]) -> list[Any]:
    """Split one subject's events into object lives: a new one where the fold goes None -> object."""
    lives: list[Any] = []
    state: Any = None
    for env in envs:
        new = fold(state, env.type, env.data, env.seq)
        if state is None and new is not None:
            lives.append(start(new, env))
        if lives:
            life = lives[-1]
            life.events.append(env)
            if new is not None:
                _seen(life, new)
            elif state is not None:
                life.deleted_seq = env.seq
        state = new
    return lives


def _seen(life: Any, obj: Any) -> None:
    if isinstance(life, Incarnation):
        if isinstance(obj, Pod):
            life.pod = obj
    else:
        owners = tuple(r.uid for r in obj.metadata.owner_references if r.kind == "Pod")
        life.owner_uids = tuple(dict.fromkeys((*life.owner_uids, *owners)))


def split_pod(envs: Iterable[Env]) -> list[Incarnation]:
    """The pod subject's events, one Incarnation per pod object, oldest first."""
    return _lives(envs, lambda obj, env: Incarnation(uid=obj.metadata.uid, first_seq=env.seq))


def claim_lives(name: str, envs: Iterable[Env]) -> list[ClaimLife]:
    return _lives(envs, lambda obj, env: ClaimLife(name=name, uid=obj.metadata.uid, first_seq=env.seq))


def owner_of_seq(incarnations: list[Incarnation], seq: int) -> Incarnation | None:
    """The incarnation that was the pod at ``seq`` (the latest one started by then)."""
    found = None
    for inc in incarnations:
        if inc.first_seq <= seq:
            found = inc
    return found


def names_of(inc: Incarnation) -> set[str]:
    """Claims an incarnation names in its spec or status, over its whole life."""
    names: set[str] = set()
    pods = [obj for e in inc.events if isinstance(obj := getattr(e.data, "object", None), Pod)]
    pods += [inc.pod] if inc.pod is not None else []
    for pod in pods:
        names |= named_claims(pod)
        names |= {r.claim_name for r in pod_claim_refs(pod)}  # KEP-3063/4381 claims
    for env in inc.events:
        for st in getattr(env.data, "statuses", ()) or ():
            if getattr(st, "resource_claim_name", None):
                names.add(st.resource_claim_name)
    return names


_ALLOCATION_FACTS = (ClaimAllocated, ClaimDeallocated, NumericClaimAllocated, NumericClaimDeallocated)


def _reserves(data: Any, uid: str) -> bool:
    """A structured or numeric (KEP-4381) claim fact putting pod ``uid`` in ``reservedFor``."""
    if isinstance(data, ClaimReserved | NumericClaimReserved):
        return data.consumer.uid == uid
    if isinstance(data, NumericClaimAllocated | ClaimAllocated):
        return data.consumer is not None and data.consumer.uid == uid
    return False


def claim_events_for(inc: Incarnation, life: ClaimLife, saga_ids: set[str], named: bool) -> list[Env]:
    """The events of one claim life that belong to this pod incarnation ([] when none do).

    Owned by the pod, or touched by one of its sagas, or reserved for it: the whole claim life.
    Only named by it (a shared claim): what happened while the pod existed, and the allocation
    in force when it was created.
    """
    if inc.uid in life.owner_uids:
        return list(life.events)
    touched = any(e.correlation_id in saga_ids for e in life.events if e.correlation_id)
    reserved = any(_reserves(e.data, inc.uid) for e in life.events)
    if touched or reserved:
        return list(life.events)
    if not named or not life.overlaps(inc):
        return []
    before = [e for e in life.events if e.seq < inc.first_seq]
    allocation = [e for e in before if isinstance(e.data, _ALLOCATION_FACTS)]
    carried = (
        allocation[-1:]
        if allocation and isinstance(allocation[-1].data, ClaimAllocated | NumericClaimAllocated)
        else []
    )
    return carried + [e for e in life.events if inc.contains(e.seq)]
