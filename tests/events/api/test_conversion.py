"""Older resource.k8s.io versions decode and convert to the v1 storage Structs."""

from __future__ import annotations

import pytest

from draflow.events.api import resource_v1 as r1
from draflow.events.api.codec import decode_object, encode_object

pytestmark = pytest.mark.kep4381


def test_v1beta1_request_fields_move_under_exactly() -> None:
    raw = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "deviceClassName": "gpu", "count": 2}]}}},
    }
    obj = decode_object(raw)
    assert isinstance(obj, r1.ResourceClaimTemplate)
    assert encode_object(obj) == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {
            "metadata": {},  # an empty embedded struct shows, as in the API server's output
            "spec": {
                "devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu", "count": 2}}]}
            },
        },
    }


def test_v1beta1_first_available_and_flat_fields_both_survive_for_validation() -> None:
    raw = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "r",
                        "deviceClassName": "a",
                        "firstAvailable": [{"name": "s", "deviceClassName": "b"}],
                    },
                    {"name": "only-sub", "firstAvailable": [{"name": "s", "deviceClassName": "b"}]},
                    {"name": "empty-selectors", "selectors": []},
                ]
            }
        },
    }
    obj = decode_object(raw)
    assert isinstance(obj, r1.ResourceClaim)
    both, sub, empty = obj.spec.devices.requests
    assert both.exactly is not None and both.first_available[0].device_class_name == "b"
    assert sub.exactly is None and len(sub.first_available) == 1
    assert empty.exactly is not None  # upstream: `selectors: []` counts as set


def test_v1beta1_slice_basic_wrapper_is_flattened() -> None:
    raw = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "tpu.google.com",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "n1",
            "devices": [
                {
                    "name": "tpu-0",
                    "basic": {"attributes": {"index": {"int": 0}}, "capacity": {"mem": {"value": "16Gi"}}},
                },
                {"name": "bare"},
            ],
        },
    }
    obj = decode_object(raw)
    assert isinstance(obj, r1.ResourceSlice)
    assert obj.spec.node_name == "n1" and obj.spec.all_nodes is None
    tpu, bare = obj.spec.devices
    assert tpu.attributes["index"].int_ == 0 and tpu.capacity["mem"].value == "16Gi"
    assert bare == r1.Device(name="bare")


def test_v1alpha3_slice_capacity_is_a_plain_quantity() -> None:
    raw = {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "ResourceSlice",
        "metadata": {"name": "imex"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1},
            "allNodes": True,
            "devices": [{"name": "channel-0", "basic": {"capacity": {"memory": "1Gi"}}}],
        },
    }
    obj = decode_object(raw)
    assert isinstance(obj, r1.ResourceSlice)
    assert obj.spec.all_nodes is True and obj.spec.node_name is None
    assert obj.spec.devices[0].capacity == {"memory": r1.DeviceCapacity(value="1Gi")}


def test_v1beta2_is_the_v1_shape() -> None:
    raw = {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r"},
        "spec": {"deviceSelector": {"driver": "d"}, "taint": {"key": "k", "effect": "NoSchedule"}},
    }
    obj = decode_object(raw)
    assert isinstance(obj, r1.DeviceTaintRule)
    assert encode_object(obj) == {**raw, "apiVersion": "resource.k8s.io/v1", "status": {}}
