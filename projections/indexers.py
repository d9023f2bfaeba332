"""Secondary indexes over an :class:`~draflow.projections.objects.ObjectIndex` (client-go's indexers).

A reader that needs "the objects of kind K whose field F is V" (a pool's ResourceSlices when a
claim is deallocated) would otherwise scan every object of the kind, which costs in proportion to
the cluster's size on a per-pod path. An indexer maps each object to its index values once, when
the object changes, and answers the question by key.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

__all__ = ["IndexFunc", "Indexers"]

IndexFunc = Callable[[Any], Iterable[Hashable]]  # object -> the values it is found under
Key = tuple[str, str]  # (namespace or "", name)


class _Indexer:
    __slots__ = ("fn", "kind", "values")

    def __init__(self, kind: str, fn: IndexFunc) -> None:
        self.kind = kind
        self.fn = fn
        self.values: dict[Hashable, set[Key]] = {}

    def change(self, key: Key, old: Any, new: Any) -> None:
        before = set(self.fn(old)) if old is not None else set()
        after = set(self.fn(new)) if new is not None else set()
        for value in before - after:
            keys = self.values.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.values[value]
        for value in after - before:
            self.values.setdefault(value, set()).add(key)


class Indexers:
    """The named indexers of one object index; told every object change by the index."""

    def __init__(self) -> None:
        self._by_name: dict[str, _Indexer] = {}
        self._by_kind: dict[str, list[_Indexer]] = {}

    def add(self, name: str, kind: str, fn: IndexFunc, objects: dict[Key, Any]) -> bool:
        """Register ``fn`` under ``name`` and index ``objects`` (the kind's current objects).
        False when ``name`` exists already (the first registration stays)."""
        if name in self._by_name:
            return False
        indexer = _Indexer(kind, fn)
        for key, obj in objects.items():
            indexer.change(key, None, obj)
        self._by_name[name] = indexer
        self._by_kind.setdefault(kind, []).append(indexer)
        return True

    def change(self, kind: str, key: Key, old: Any, new: Any) -> None:
        for indexer in self._by_kind.get(kind, ()):
            indexer.change(key, old, new)

    def keys(self, name: str, value: Hashable) -> list[Key]:
        """The keys of the objects found under ``value``, sorted (KeyError: no such indexer)."""
        return sorted(self._by_name[name].values.get(value, ()))

    def rebuild(self, objects: dict[str, dict[Key, Any]]) -> None:
        """Index every object again (the index adopted another state)."""
        for indexer in self._by_name.values():
            indexer.values.clear()
            for key, obj in objects.get(indexer.kind, {}).items():
                indexer.change(key, None, obj)

    def kind(self, name: str) -> str:
        return self._by_name[name].kind
