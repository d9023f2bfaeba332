"""Secondary indexes of the object fold (``ObjectIndex.add_index`` / ``by_index``): kept in step
with every change, rebuilt when the index adopts another state, and answering without a scan."""

from __future__ import annotations

from typing import Any

from draflow.events.api.resource_v1 import ResourceSlice
from draflow.events.objects import object_applied, object_deleted
from draflow.projections.objects import ObjectIndex
from tests.builders import make_slice

KIND = "ResourceSlice"


def _pool(obj: Any) -> tuple[tuple[str, str], ...]:
    return ((obj.spec.driver, obj.spec.pool.name),)


def _apply(index: ObjectIndex, slc: ResourceSlice, seq: int) -> None:
    ev = object_applied(slc)
    index.apply(KIND, "", slc.metadata.name, type(ev).type_name(), ev, seq)


def _names(objs: list[Any]) -> list[str]:
    return [o.metadata.name for o in objs]


def test_index_follows_creates_moves_and_deletes() -> None:
    index = ObjectIndex()
    _apply(index, make_slice("n1", 1, name="a"), 1)
    index.add_index("pool", KIND, _pool)  # indexes what is there already
    _apply(index, make_slice("n1", 1, name="b"), 2)
    _apply(index, make_slice("n2", 1, name="c"), 3)
    assert _names(index.by_index("pool", ("gpu.example.com", "n1"))) == ["a", "b"]
    _apply(index, make_slice("n2", 1, name="b"), 4)  # b moves to pool n2
    assert _names(index.by_index("pool", ("gpu.example.com", "n1"))) == ["a"]
    assert _names(index.by_index("pool", ("gpu.example.com", "n2"))) == ["b", "c"]
    ev = object_deleted(KIND)
    index.apply(KIND, "", "c", type(ev).type_name(), ev, 5)
    assert _names(index.by_index("pool", ("gpu.example.com", "n2"))) == ["b"]
    assert index.by_index("pool", ("gpu.example.com", "n9")) == []
    index.put(KIND, "", "d", make_slice("n9", 1, name="d"), 6)
    assert _names(index.by_index("pool", ("gpu.example.com", "n9"))) == ["d"]


def test_second_registration_keeps_the_first_and_adopt_rebuilds() -> None:
    index = ObjectIndex()
    index.add_index("pool", KIND, _pool)
    index.add_index("pool", KIND, lambda obj: ())  # ignored: the name exists
    _apply(index, make_slice("n1", 1, name="a"), 1)
    assert _names(index.by_index("pool", ("gpu.example.com", "n1"))) == ["a"]
    other = ObjectIndex()
    _apply(other, make_slice("n2", 1, name="z"), 1)
    index.adopt(other)  # a snapshot loaded at start
    assert index.by_index("pool", ("gpu.example.com", "n1")) == []
    assert _names(index.by_index("pool", ("gpu.example.com", "n2"))) == ["z"]


class _NoScan(ObjectIndex):
    """An index that fails a lookup scanning a whole kind (what would cost per pod in proportion
    to the cluster's size)."""

    def values(self, kind: str) -> Any:
        raise AssertionError(f"scanned every {kind}")

    def items(self, kind: str, namespace: str | None = None) -> list[Any]:
        raise AssertionError(f"scanned every {kind}")


def test_a_pool_lookup_does_not_scan_slices() -> None:
    """A lookup per pod (the allocator's pool slices) costs nothing in proportion to the cluster."""
    index = _NoScan()
    for i in range(200):
        _apply(index, make_slice(f"node-{i}", 2), i + 1)
    index.add_index("pool", KIND, _pool)
    assert _names(index.by_index("pool", ("gpu.example.com", "node-7"))) == ["node-7-gpu.example.com"]
    assert list(index.by_index("pool", ("gpu.example.com", "node-999"))) == []
