"""Extended resource → DeviceClass index: implicit names, precedence, incremental updates."""

from __future__ import annotations

import itertools

from services.dra.extended import ExtendedResourceIndex, is_dra_extended_resource_name
from tests.extended.helpers import device_class

OLD = "2025-01-01T00:00:00Z"
NEW = "2025-06-01T00:00:00Z"


def test_implicit_name_for_every_class() -> None:
    idx = ExtendedResourceIndex.from_classes([device_class("gpu.example.com"), device_class("b")])
    assert idx.class_for("deviceclass.resource.kubernetes.io/gpu.example.com") == "gpu.example.com"
    assert idx.class_for("deviceclass.resource.kubernetes.io/b") == "b"
    assert idx.class_for("example.com/gpu") is None


def test_explicit_name_and_implicit_both_map() -> None:
    idx = ExtendedResourceIndex.from_classes([device_class("gpu.example.com", "example.com/gpu")])
    assert idx.class_for("example.com/gpu") == "gpu.example.com"
    assert idx.is_dra_backed("deviceclass.resource.kubernetes.io/gpu.example.com")
    assert idx.explicit_name_of("gpu.example.com") == "example.com/gpu"


def test_newest_wins_regardless_of_event_order() -> None:
    classes = [
        device_class("old", "example.com/gpu", OLD),
        device_class("new", "example.com/gpu", NEW),
        device_class("untimed", "example.com/gpu", None),
    ]
    for order in itertools.permutations(classes):
        assert ExtendedResourceIndex.from_classes(order).class_for("example.com/gpu") == "new"


def test_tie_goes_to_lexicographically_first_name() -> None:
    classes = [device_class("zeta", "example.com/gpu", NEW), device_class("alpha", "example.com/gpu", NEW)]
    for order in itertools.permutations(classes):
        assert ExtendedResourceIndex.from_classes(order).class_for("example.com/gpu") == "alpha"


def test_timezone_offsets_compare_as_instants() -> None:
    # 02:00+03:00 is 23:00Z the day before: older than 00:00Z.
    idx = ExtendedResourceIndex.from_classes(
        [
            device_class("a", "example.com/gpu", "2025-06-01T02:00:00+03:00"),
            device_class("b", "example.com/gpu", "2025-06-01T00:00:00Z"),
        ]
    )
    assert idx.class_for("example.com/gpu") == "b"


def test_delete_winner_promotes_runner_up() -> None:
    idx = ExtendedResourceIndex.from_classes(
        [device_class("old", "example.com/gpu", OLD), device_class("new", "example.com/gpu", NEW)]
    )
    idx.delete("new")
    assert idx.class_for("example.com/gpu") == "old"
    assert idx.class_for("deviceclass.resource.kubernetes.io/new") is None
    idx.delete("old")
    assert idx.class_for("example.com/gpu") is None
    assert len(idx) == 0


def test_update_renaming_explicit_name_releases_old_one() -> None:
    idx = ExtendedResourceIndex.from_classes(
        [device_class("old", "example.com/gpu", OLD), device_class("new", "example.com/gpu", NEW)]
    )
    idx.apply(device_class("new", "example.com/tpu", NEW))
    assert idx.class_for("example.com/gpu") == "old"
    assert idx.class_for("example.com/tpu") == "new"
    idx.apply(device_class("new", None, NEW))
    assert idx.class_for("example.com/tpu") is None
    assert idx.class_for("deviceclass.resource.kubernetes.io/new") == "new"
    assert idx.mappings() == {
        "deviceclass.resource.kubernetes.io/new": "new",
        "deviceclass.resource.kubernetes.io/old": "old",
        "example.com/gpu": "old",
    }


def test_delete_unknown_class_is_a_noop() -> None:
    idx = ExtendedResourceIndex()
    idx.delete("nope")
    assert idx.mappings() == {}


def test_resource_name_predicates() -> None:
    assert is_dra_extended_resource_name("example.com/gpu")
    assert is_dra_extended_resource_name("deviceclass.resource.kubernetes.io/gpu.example.com")
    assert not is_dra_extended_resource_name("cpu")
    assert not is_dra_extended_resource_name("kubernetes.io/foo")
    assert not is_dra_extended_resource_name("requests.example.com/gpu")
    assert not is_dra_extended_resource_name("example.com/" + "x" * 64)
