"""How the API server turns what a user sends into what it stores (pure; the registry "strategy").

* Create: server-owned metadata in the manifest (uid, resourceVersion, creationTimestamp,
  generation, deletion fields, managedFields) is ignored, so object dumps (``kubectl get -o yaml``
  output, the List dumps in the real-world corpus) can be applied; status is reset for kinds whose
  status is written by controllers (everything but Node, whose status kubelets and tests send with
  the object, as scheduler_perf does). Then uid, creationTimestamp and generation 1 are assigned.
* Update (apply onto an existing object): the manifest owns labels, annotations and spec, after
  defaulting (a field it leaves out gets its default, as when kubectl's patch deletes a field it
  applied before); the server keeps identity, timestamps and status, keeps finalizers that
  controllers added (the result is the union), ownerReferences when the manifest has none, and
  every ``SERVER_SET_FIELDS`` field the manifest leaves unset (a pod's ``spec.nodeName`` once
  bound): kubectl apply's patch never names a field its manifest does not have. An apply whose
  result equals the stored object changes nothing (``unchanged``). ``generation`` goes up when
  anything outside metadata and status changes. Upstream's three-way merge (last-applied
  configuration) is not modelled. Whether a change is allowed at all (an immutable pod spec) is
  validation's call (``admission.updates``).
* Device taints without ``timeAdded`` (a DeviceTaintRule's, a ResourceSlice device's) get the
  time of the write (``stamp_taint_times``); an update keeps the stored time of an unchanged taint.
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

import msgspec
from msgspec.structs import replace

from draflow.events.api import core_v1 as c1
from draflow.events.api import resource_v1 as r1
from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import object_meta
from draflow.events.envelope import Event
from draflow.events.objects import (
    FOREGROUND_FINALIZER,
    ORPHAN_FINALIZER,
    deletion_requested,
    finalizers_changed,
    object_deleted,
)
from draflow.services.dra.resourceclaim import is_pod_terminal

__all__ = [
    "CONTROLLER_ITEMS",
    "CONTROLLER_TAINT_KEYS",
    "PROPAGATION_POLICIES",
    "SERVER_SET_FIELDS",
    "deletion_events",
    "finalize_events",
    "gc_finalizers",
    "generated_name",
    "keep_defaulted",
    "keep_server_set",
    "merge_update",
    "now_rfc3339",
    "prepare_create",
    "stamp_create",
]

S = TypeVar("S", bound=ApiStruct)

STATUS_KEPT_ON_CREATE = frozenset({"Node"})
# Body fields (attribute paths) that the server or a controller writes, not the manifest's author:
# the binding's spec.nodeName (PodBound), the node IPAM's podCIDR(s), the cloud provider's
# providerID and a Lease's renewTime (each renewal is a LeaseRenewed fact, not an apply). An apply
# that leaves one unset keeps the stored value. Every domain event that writes outside status and
# finalizers must be listed here or in CONTROLLER_ITEMS (tests/services/apiserver/test_server_set_fields.py
# checks each registered reducer against these tables).
SERVER_SET_FIELDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "Pod": (("spec", "node_name"),),
    "Node": (("spec", "pod_cidr"), ("spec", "pod_cidrs"), ("spec", "provider_id")),
    "Lease": (("spec", "renew_time"),),
}
# Lists whose items a controller adds next to the author's: the node lifecycle controller's
# condition taints (NodeTainted / NodeUntainted). An apply owns the other items of the list and
# keeps the stored controller items it does not name (by key and effect), as kubectl's three-way
# merge keeps taints its last-applied configuration never had.
CONTROLLER_TAINT_KEYS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/network-unavailable",
        "node.kubernetes.io/unschedulable",
    }
)
CONTROLLER_ITEMS: dict[str, tuple[tuple[str, ...], ...]] = {"Node": (("spec", "taints"),)}
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


def _taint_time(taint: r1.DeviceTaint, stored: tuple[r1.DeviceTaint, ...], now: str) -> r1.DeviceTaint:
    if taint.time_added is not None:
        return taint
    ident = (taint.key, taint.value, taint.effect)
    same = next((t for t in stored if (t.key, t.value, t.effect) == ident), None)
    return replace(taint, time_added=same.time_added if same is not None and same.time_added else now)


def stamp_taint_times(obj: S, old: S | None, now: str) -> S:
    """Device taints get ``timeAdded`` when they have none (upstream ``SetDefaults_DeviceTaint``:
    the time of the write, to the second): a DeviceTaintRule's taint and the taints of a
    ResourceSlice's devices. An update that leaves it out (a manifest applied again) keeps the
    stored time of the same taint (key, value and effect), as kubectl apply's patch would."""
    if isinstance(obj, r1.DeviceTaintRule):
        taint = obj.spec.taint
        stored: tuple[r1.DeviceTaint, ...] = (old.spec.taint,) if isinstance(old, r1.DeviceTaintRule) else ()
        stamped = _taint_time(taint, stored, now)
        return obj if stamped is taint else replace(obj, spec=replace(obj.spec, taint=stamped))
    untimed = isinstance(obj, r1.ResourceSlice) and any(
        t.time_added is None for d in obj.spec.devices for t in d.taints
    )
    if isinstance(obj, r1.ResourceSlice) and untimed:
        old_devices = {d.name: d for d in old.spec.devices} if isinstance(old, r1.ResourceSlice) else {}
        devices = []
        for d in obj.spec.devices:
            prior = old_devices.get(d.name)
            stored = prior.taints if prior is not None else ()
            devices.append(replace(d, taints=tuple(_taint_time(t, stored, now) for t in d.taints)))
        return replace(obj, spec=replace(obj.spec, devices=tuple(devices)))
    return obj


def _body_fields(obj: ApiStruct) -> tuple[str, ...]:
    return tuple(f for f in obj.__struct_fields__ if f not in ("metadata", "status"))


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for attr in path:
        obj = getattr(obj, attr)
    return obj


def _put(obj: Any, path: tuple[str, ...], value: Any) -> Any:
    head, *rest = path
    return replace(obj, **{head: _put(getattr(obj, head), tuple(rest), value) if rest else value})


def _default(cls: type, name: str) -> Any:
    info = next(f for f in msgspec.structs.fields(cls) if f.name == name)
    return info.default_factory() if info.default is msgspec.NODEFAULT else info.default


def _unset(obj: Any, path: tuple[str, ...]) -> bool:
    """The field at ``path`` has its struct default (what a manifest without it decodes to)."""
    parent = _get(obj, path[:-1])
    return bool(getattr(parent, path[-1]) == _default(type(parent), path[-1]))


def keep_server_set(old: S, new: S) -> S:
    """``new`` with the stored value of every server-set field it leaves unset."""
    for path in SERVER_SET_FIELDS.get(old.KIND, ()):
        if _unset(new, path) and not _unset(old, path):
            new = _put(new, path, _get(old, path))
    if isinstance(old, c1.Node) and isinstance(new, c1.Node):
        named = {(t.key, t.effect) for t in new.spec.taints}
        kept = tuple(
            t for t in old.spec.taints if t.key in CONTROLLER_TAINT_KEYS and (t.key, t.effect) not in named
        )
        if kept:
            new = replace(new, spec=replace(new.spec, taints=new.spec.taints + kept))
    return new


def _counterpart(item: Any, i: int, stored: tuple[Any, ...]) -> Any:
    """The stored element a list element merges with: same ``name`` (containers, requests), else
    the same position (kubectl's strategic merge keys lists of named things by name)."""
    name = getattr(item, "name", "")
    if isinstance(name, str) and name:
        return next((s for s in stored if getattr(s, "name", None) == name), None)
    return stored[i] if i < len(stored) else None


def _keep(raw: Any, dflt: Any, stored: Any) -> Any:
    """``dflt`` (the defaulted manifest) with every value defaulting filled in where the manifest
    said nothing replaced by the stored one: walks structs field by field, lists of structs by
    element, and stops at the first value the manifest did set."""
    if raw == dflt or stored is None:
        return dflt
    if isinstance(dflt, msgspec.Struct) and type(raw) is type(dflt) and type(stored) is type(dflt):
        changes = {}
        for name in dflt.__struct_fields__:
            r, d = getattr(raw, name), getattr(dflt, name)
            if r == d:
                continue
            s = getattr(stored, name)
            if r == _default(type(raw), name) and not isinstance(d, msgspec.Struct | tuple):
                if s != _default(type(stored), name):
                    changes[name] = s  # filled by defaulting: the stored value stands
            else:
                changes[name] = _keep(r, d, s)
        return replace(dflt, **changes) if changes else dflt
    lists = isinstance(dflt, tuple) and isinstance(raw, tuple) and isinstance(stored, tuple)
    if lists and len(raw) == len(dflt):
        pairs = enumerate(zip(raw, dflt, strict=True))
        return tuple(_keep(r, d, _counterpart(r, i, stored)) for i, (r, d) in pairs)
    return dflt


def keep_defaulted(raw: S, defaulted: S, old: S) -> S:
    """The defaulted manifest with the stored value of every body field that defaulting filled in
    (kubectl apply's patch does not name a field its manifest lacks: a changed image does not
    re-default ``imagePullPolicy``, requests copied from limits stay as stored)."""
    if type(raw) is not type(old):
        return defaulted
    changes = {
        f: _keep(getattr(raw, f), getattr(defaulted, f), getattr(old, f)) for f in _body_fields(defaulted)
    }
    return replace(defaulted, **changes)


def merge_update(
    old: S, new: S, raw: S | None = None, *, replace_meta: bool = False, managed_fields: bool = False
) -> S:
    """The stored object after applying ``new`` (defaulted) onto ``old``; equal to ``old`` if unchanged.

    ``raw`` is the manifest before defaulting: fields defaulting filled in keep their stored value.
    ``replace_meta`` (an update, PUT): finalizers and ownerReferences are the manifest's.
    ``managed_fields``: the manifest's managedFields are stored (server-side apply computed them).
    """
    if raw is not None:
        new = keep_defaulted(raw, new, old)
    new = keep_server_set(old, new)
    om, nm = object_meta(old), object_meta(new)
    finalizers = (
        nm.finalizers
        if replace_meta
        else om.finalizers + tuple(f for f in nm.finalizers if f not in om.finalizers)
    )
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
        managed_fields=nm.managed_fields if managed_fields else om.managed_fields,
        finalizers=finalizers,
        owner_references=nm.owner_references if replace_meta else nm.owner_references or om.owner_references,
    )
    changes: dict[str, Any] = {"metadata": meta}
    if hasattr(old, "status"):
        changes["status"] = old.status
    merged = replace(new, **changes)
    if any(getattr(merged, f) != getattr(old, f) for f in _body_fields(old)):
        merged = replace(merged, metadata=replace(meta, generation=om.generation + 1))
    return merged


def _graceful_pod(obj: ApiStruct) -> bool:
    return isinstance(obj, c1.Pod) and bool(obj.spec.node_name) and not is_pod_terminal(obj)


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
