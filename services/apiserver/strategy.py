"""How the API server turns what a user sends into what it stores (pure; the registry "strategy").

* Create: server-owned metadata in the manifest (uid, resourceVersion, creationTimestamp,
  generation, deletion fields, managedFields) is ignored, so object dumps (``kubectl get -o yaml``
  output, the List dumps in the real-world corpus) can be applied; status is reset for kinds whose
  status is written by controllers (everything but Node, whose status kubelets and tests send with
  the object, as scheduler_perf does). Then uid, creationTimestamp and generation 1 are assigned.
* Update (apply onto an existing object): the manifest owns labels, annotations and spec; the
  server keeps identity, timestamps and status, keeps finalizers that controllers added (the
  result is the union) and ownerReferences when the manifest has none. ``generation`` goes up
  when anything outside metadata and status changes. Upstream's three-way merge (last-applied
  configuration) is not modelled.
* Delete: objects with finalizers, and pods bound to a node (graceful deletion: the kubelet
  confirms with grace period 0), get ``deletionTimestamp`` first; the rest go at once. A
  ``propagationPolicy`` of Orphan / Foreground puts the ``orphan`` / ``foregroundDeletion``
  finalizer on the object (and takes the other off; Background takes both off), so the garbage
  collector orphans or deletes its dependents before it goes; no policy keeps what is there.
"""

from __future__ import annotations

import datetime
import random
from typing import Any, TypeVar

from msgspec.structs import replace

from events.api import core_v1 as c1
from events.api.base import ApiStruct
from events.api.codec import object_meta
from events.envelope import Event
from events.objects import (
    FOREGROUND_FINALIZER,
    ORPHAN_FINALIZER,
    deletion_requested,
    finalizers_changed,
    object_deleted,
)

__all__ = [
    "PROPAGATION_POLICIES",
    "deletion_events",
    "finalize_events",
    "gc_finalizers",
    "generated_name",
    "merge_update",
    "now_rfc3339",
    "prepare_create",
    "stamp_create",
]

S = TypeVar("S", bound=ApiStruct)

STATUS_KEPT_ON_CREATE = frozenset({"Node"})
# k8s.io/apimachinery/pkg/util/rand: consonants and digits, no vowels (no words) and no 0/1/3.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MAX_GENERATED_NAME = 63
_NAME_SUFFIX = 5


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def generated_name(prefix: str, rng: random.Random | None = None) -> str:
    """``generateName`` + 5 random characters, the prefix cut so the name fits 63 characters."""
    r = rng or random.SystemRandom()
    suffix = "".join(r.choice(_NAME_ALPHABET) for _ in range(_NAME_SUFFIX))
    return prefix[: MAX_GENERATED_NAME - _NAME_SUFFIX] + suffix


def prepare_create(obj: S) -> S:
    """Drop what a client cannot set on create (before defaulting and validation)."""
    meta = object_meta(obj)
    clean = replace(
        meta,
        uid="",
        resource_version="",
        creation_timestamp=None,
        generation=0,
        deletion_timestamp=None,
        deletion_grace_period_seconds=None,
        self_link="",
        managed_fields=(),
    )
    changes: dict[str, Any] = {"metadata": clean}
    status = getattr(obj, "status", None)
    if status is not None and obj.KIND not in STATUS_KEPT_ON_CREATE:
        changes["status"] = type(status)()
    return replace(obj, **changes)


def stamp_create(obj: S, *, uid: str, now: str) -> S:
    """The server's part of a new object's metadata."""
    meta = replace(object_meta(obj), uid=uid, creation_timestamp=now, generation=1)
    return replace(obj, metadata=meta)


def _body_fields(obj: ApiStruct) -> tuple[str, ...]:
    return tuple(f for f in obj.__struct_fields__ if f not in ("metadata", "status"))


def merge_update(old: S, new: S) -> S:
    """The stored object after applying ``new`` (defaulted) onto ``old``; equal to ``old`` if unchanged."""
    om, nm = object_meta(old), object_meta(new)
    finalizers = om.finalizers + tuple(f for f in nm.finalizers if f not in om.finalizers)
    meta = replace(
        nm,
        generate_name=nm.generate_name or om.generate_name,
        uid=om.uid,
        resource_version=om.resource_version,
        creation_timestamp=om.creation_timestamp,
        generation=om.generation,
        deletion_timestamp=om.deletion_timestamp,
        deletion_grace_period_seconds=om.deletion_grace_period_seconds,
        self_link="",
        managed_fields=om.managed_fields,
        finalizers=finalizers,
        owner_references=nm.owner_references or om.owner_references,
    )
    changes: dict[str, Any] = {"metadata": meta}
    if hasattr(old, "status"):
        changes["status"] = old.status
    merged = replace(new, **changes)
    if any(getattr(merged, f) != getattr(old, f) for f in _body_fields(old)):
        merged = replace(merged, metadata=replace(meta, generation=om.generation + 1))
    return merged


def _graceful_pod(obj: ApiStruct) -> bool:
    return (
        isinstance(obj, c1.Pod)
        and bool(obj.spec.node_name)
        and obj.status.phase not in ("Succeeded", "Failed")
    )


PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


def gc_finalizers(finalizers: tuple[str, ...], propagation: str | None) -> tuple[str, ...]:
    """The finalizers after a delete with this propagation policy (None/"": the object's own)."""
    if not propagation:
        return finalizers
    kept = tuple(f for f in finalizers if f not in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER))
    if propagation == "Orphan":
        return (*kept, ORPHAN_FINALIZER)
    if propagation == "Foreground":
        return (*kept, FOREGROUND_FINALIZER)
    return kept


def deletion_events(
    obj: ApiStruct, now: str, grace_period_seconds: int | None = None, propagation: str | None = None
) -> list[Event]:
    """What a delete request appends: DeletionRequested, Deleted, or nothing (already deleting);
    preceded by FinalizersChanged when the propagation policy changes the GC finalizers."""
    meta = object_meta(obj)
    finalizers = gc_finalizers(meta.finalizers, propagation)
    if finalizers != meta.finalizers:
        changed = [finalizers_changed(obj.KIND, finalizers)]
        meta = replace(meta, finalizers=finalizers)
        return changed + _deletion(replace(obj, metadata=meta), now, grace_period_seconds)
    return _deletion(obj, now, grace_period_seconds)


def _deletion(obj: ApiStruct, now: str, grace_period_seconds: int | None) -> list[Event]:
    meta = object_meta(obj)
    grace = 0
    if _graceful_pod(obj):
        assert isinstance(obj, c1.Pod)
        default = obj.spec.termination_grace_period_seconds
        grace = (
            grace_period_seconds if grace_period_seconds is not None else (30 if default is None else default)
        )
    if not meta.finalizers and grace <= 0:
        return [object_deleted(obj.KIND)]
    current = meta.deletion_grace_period_seconds
    if meta.deletion_timestamp is not None and current is not None and current <= grace:
        return []  # already being deleted, no shorter grace period asked for
    return [deletion_requested(obj.KIND, meta.deletion_timestamp or now, max(grace, 0))]


class FinalizerForbidden(ValueError):
    pass


def finalize_events(obj: ApiStruct, add: list[str], remove: list[str]) -> list[Event]:
    """Events for adding/removing finalizers; the last one gone on a deleted object removes it."""
    meta = object_meta(obj)
    kept = tuple(f for f in meta.finalizers if f not in remove)
    added = tuple(dict.fromkeys(f for f in add if f not in kept and f not in remove))
    if added and meta.deletion_timestamp is not None:
        raise FinalizerForbidden("no new finalizers can be added if the object is being deleted")
    new = kept + added
    if new == meta.finalizers:
        return []
    events = [finalizers_changed(obj.KIND, new)]
    if not new and meta.deletion_timestamp is not None and not meta.deletion_grace_period_seconds:
        events.append(object_deleted(obj.KIND))
    return events
