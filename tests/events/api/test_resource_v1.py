"""resource.k8s.io/v1 Structs decode real objects strictly and encode them back."""

from __future__ import annotations

import re

import pytest
import yaml

from draflow.events.api import resource_v1 as r1
from draflow.events.api.codec import decode_object, encode_object
from draflow.events.api.errors import ApiError
from tests.paths import TESTS

pytestmark = pytest.mark.kep4381

CONFORMANCE = TESTS / "services" / "dra" / "structured" / "vectors"  # the project's copy


def _claim(exactly: dict) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "req-0", "exactly": exactly}]}},
    }


def test_allocator_conformance_objects_decode() -> None:
    seen = 0
    for path in sorted(CONFORMANCE.glob("*.yaml")):
        for raw in yaml.safe_load(path.read_text())["objects"]:
            if raw["kind"] == "Node":
                continue
            obj = decode_object(raw)
            assert obj.KIND == raw["kind"]
            seen += 1
    assert seen > 200


def test_claim_round_trip_keeps_what_the_user_wrote() -> None:
    raw = _claim({"deviceClassName": "gpu.example.com", "count": 2, "adminAccess": True})
    obj = decode_object(raw)
    assert isinstance(obj, r1.ResourceClaim)
    req = obj.spec.devices.requests[0]
    assert req.exactly is not None and req.exactly.count == 2 and req.exactly.admin_access is True
    assert encode_object(obj) == {**raw, "status": {}}  # as `kubectl get -o yaml` shows it


def test_unknown_field_is_named_with_its_path() -> None:
    with pytest.raises(ApiError) as info:
        decode_object(_claim({"deviceClassName": "x", "cout": 2}))
    assert str(info.value) == (
        "ResourceClaim default/gpu: strict decoding error: "
        'unknown field "spec.devices.requests[0].exactly.cout"'
    )


def test_quantities_are_canonical_and_numbers_accepted() -> None:
    raw = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "d",
            "pool": {"name": "p", "resourceSliceCount": 1},
            "nodeName": "n",
            "devices": [{"name": "a", "capacity": {"memory": {"value": "0.5Gi"}, "cores": {"value": 8}}}],
        },
    }
    obj = decode_object(raw)
    assert isinstance(obj, r1.ResourceSlice)
    cap = obj.spec.devices[0].capacity
    assert cap["memory"].value == "512Mi"
    assert cap["cores"].value == "8"


def test_bad_quantity_in_a_map_names_the_key() -> None:
    raw = _claim({"deviceClassName": "x", "capacity": {"requests": {"memory": "1Gi", "bw": "ten"}}})
    with pytest.raises(ApiError) as info:
        decode_object(raw)
    assert "spec.devices.requests[0].exactly.capacity.requests[bw]: quantities must match" in str(info.value)


def test_attribute_python_builtin_names_map_to_int_and_bool() -> None:
    attr = r1.DeviceAttribute(int_=3, bool_=True)
    raw = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {"devices": [{"name": "a", "attributes": {"x": {"int": 3, "bool": True}}}]},
    }
    obj = decode_object(raw)
    assert isinstance(obj, r1.ResourceSlice)
    assert obj.spec.devices[0].attributes["x"] == attr


def test_unserved_kind_is_refused_like_kubectl() -> None:
    with pytest.raises(
        ApiError,
        match=re.escape('no matches for kind "ComputeDomain" in version "resource.nvidia.com/v1beta1"'),
    ):
        decode_object(
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "metadata": {"name": "x"}}
        )
