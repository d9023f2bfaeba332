"""API objects are not tracked by the cyclic GC (``ApiStruct`` is ``gc=False``): a scheduler or
apiserver holding a 5,000-node cluster would otherwise have millions of tracked objects, and
every full collection would walk them all, a pause in proportion to the cluster."""

from __future__ import annotations

import gc

from draflow.events.api.resource_v1 import DeviceAttribute
from draflow.services.dra.structured.prepared import attr_value
from tests.builders import make_claim, make_pod, make_slice


def test_api_objects_and_their_parts_are_untracked() -> None:
    pod, claim, slc = make_pod("p", cpu="1"), make_claim("c"), make_slice("n1", 4, model="h100")
    for obj in (pod, pod.metadata, pod.spec, claim, claim.spec.devices, slc, slc.spec.devices[0]):
        assert not gc.is_tracked(obj), type(obj).__name__
    gc.collect()  # tuples holding only untracked objects are untracked by the next collection
    assert not gc.is_tracked(slc.spec.devices)


def test_scalar_attribute_values_are_shared() -> None:
    """Every device's ``model: h100`` is one value, not a tuple and a set per device."""
    a, b = attr_value(DeviceAttribute(string="h100")), attr_value(DeviceAttribute(string="h100"))
    assert a is b and a == ("string", frozenset({"h100"}), False)
    assert attr_value(DeviceAttribute(int_=1)) != attr_value(DeviceAttribute(bool_=True))
    assert attr_value(DeviceAttribute(strings=("a", "b"))) == ("string", frozenset({"a", "b"}), True)
