"""Extended resource name → DeviceClass, maintained incrementally from DeviceClass events.

Every class is reachable under its implicit name ``deviceclass.resource.kubernetes.io/<class>``;
a class may also claim an explicit ``spec.extendedResourceName``. Several classes may claim the
same explicit name (e.g. while migrating from one class to another): the newest
``creationTimestamp`` wins, ties go to the lexicographically smaller class name — the
arbitration of upstream's ``deviceclass/extendedresourcecache``. All candidates are kept, so
renaming or deleting the winner promotes the runner-up instead of leaving the name unmapped.

Deterministic: the winner depends only on the set of classes, never on event order.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from events.api.resource_v1 import DeviceClass
from services.dra.extended.names import implicit_name

__all__ = ["ExtendedResourceIndex", "creation_key", "parse_timestamp"]

_ZERO = datetime.min


def creation_key(cls: DeviceClass) -> datetime:
    """The class's creationTimestamp as a naive UTC datetime; unset or unparsable = oldest.

    Upstream compares ``metav1.Time`` (zero when unset), so a class without a timestamp loses to
    any class that has one.
    """
    return parse_timestamp(cls.metadata.creation_timestamp)


def parse_timestamp(ts: str | None) -> datetime:
    """An RFC 3339 timestamp as a naive UTC datetime; unset or unparsable = the zero time."""
    if not ts:
        return _ZERO
    try:
        parsed = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return _ZERO
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


def _better(a: DeviceClass, b: DeviceClass | None) -> bool:
    """True if ``a`` should own an explicit name over ``b``: newer first, then smaller name."""
    if b is None:
        return True
    ka, kb = creation_key(a), creation_key(b)
    if ka != kb:
        return ka > kb
    return a.metadata.name < b.metadata.name


class ExtendedResourceIndex:
    """The scheduler's and the quota code's view of which class serves which extended resource.

    ``apply(cls)`` for DeviceClass added/updated, ``delete(name)`` for deleted. Reads:
    ``class_for(resource)`` (winning class name or None), ``device_class(resource)``,
    ``explicit_name_of(class)`` (the class's own ``extendedResourceName``, winning or not —
    upstream's quota evaluator charges ``requests.<that name>`` by it), ``is_dra_backed``.
    """

    def __init__(self) -> None:
        self._classes: dict[str, DeviceClass] = {}
        # explicit name -> candidate class names
        self._candidates: dict[str, set[str]] = {}
        # resource name -> winning class name (explicit winners and every implicit name)
        self._winner: dict[str, str] = {}

    @classmethod
    def from_classes(cls, classes: Iterable[DeviceClass]) -> ExtendedResourceIndex:
        index = cls()
        for dc in classes:
            index.apply(dc)
        return index

    # -- events -----------------------------------------------------------------------------

    def apply(self, dc: DeviceClass) -> None:
        """DeviceClass added or updated (an update may change or drop the explicit name)."""
        name = dc.metadata.name
        old = self._classes.get(name)
        self._classes[name] = dc
        old_explicit = old.spec.extended_resource_name if old is not None else None
        new_explicit = dc.spec.extended_resource_name
        if old_explicit and old_explicit != new_explicit:
            self._drop_candidate(old_explicit, name)
        if new_explicit:
            self._candidates.setdefault(new_explicit, set()).add(name)
            self._recompute(new_explicit)
        self._winner[implicit_name(name)] = name

    def delete(self, class_name: str) -> None:
        """DeviceClass deleted: its implicit name goes, its explicit name passes to the runner-up."""
        old = self._classes.pop(class_name, None)
        self._winner.pop(implicit_name(class_name), None)
        if old is not None and old.spec.extended_resource_name:
            self._drop_candidate(old.spec.extended_resource_name, class_name)

    def _drop_candidate(self, explicit: str, class_name: str) -> None:
        candidates = self._candidates.get(explicit)
        if candidates is None:
            return
        candidates.discard(class_name)
        if not candidates:
            del self._candidates[explicit]
        self._recompute(explicit)

    def _recompute(self, explicit: str) -> None:
        best: DeviceClass | None = None
        for cname in sorted(self._candidates.get(explicit, ())):
            dc = self._classes[cname]
            if _better(dc, best):
                best = dc
        if best is None:
            # An implicit name is never a candidate (validation keeps explicit names out of the
            # implicit prefix), so removing the explicit winner cannot hide an implicit mapping.
            self._winner.pop(explicit, None)
        else:
            self._winner[explicit] = best.metadata.name

    # -- reads ------------------------------------------------------------------------------

    def class_for(self, resource_name: str) -> str | None:
        """Name of the DeviceClass serving ``resource_name``, or None when no class maps it."""
        return self._winner.get(resource_name)

    def device_class(self, resource_name: str) -> DeviceClass | None:
        cname = self._winner.get(resource_name)
        return self._classes.get(cname) if cname is not None else None

    def is_dra_backed(self, resource_name: str) -> bool:
        """The predicate ``NodeResourcesFit(dra_backed=...)`` takes."""
        return resource_name in self._winner

    def explicit_name_of(self, class_name: str) -> str | None:
        dc = self._classes.get(class_name)
        return dc.spec.extended_resource_name or None if dc is not None else None

    def mappings(self) -> dict[str, str]:
        """Every mapped resource name → class name (a copy, sorted by resource name)."""
        return dict(sorted(self._winner.items()))

    def __contains__(self, resource_name: object) -> bool:
        return resource_name in self._winner

    def __len__(self) -> int:
        return len(self._classes)
