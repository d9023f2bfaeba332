"""The shipped numeric models' builtin controllers and the entry-point registry (pure)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from draflow.events.api.meta import LabelSelector
from draflow.services.dra.numeric import counter, partitions
from draflow.services.dra.numeric.model import Instance, InstanceKey, ModelDecodeError, decode_model_object
from draflow.services.dra.numeric.registry import load_models

pytestmark = pytest.mark.kep4381


def counter_instance(node: str, iid: str, count: int, **labels: str) -> Instance[counter.Capacity]:
    cap = decode_model_object(counter.Capacity, {"count": count, "metadata": {"labels": labels}})
    return Instance(InstanceKey(node, "frob", iid), cap)


def test_counter_best_fit_joint_and_books() -> None:
    ctl = counter.CounterController()
    ctl.set_capacity("n1", "frob", [counter_instance("n1", "a", 8), counter_instance("n1", "b", 4)])
    three = counter.Parameters(required=3)
    assert ctl.allocate("n1", "frob", [three]) == [counter.Allocation(instance="b", count=3)]
    # jointly: the second claim sees what the first took
    assert ctl.allocate("n1", "frob", [three, three]) == [
        counter.Allocation(instance="b", count=3),
        counter.Allocation(instance="a", count=3),
    ]
    ctl.observe_allocation("uid-1", "n1", "frob", counter.Allocation(instance="a", count=8))
    assert (
        ctl.allocate("n1", "frob", [counter.Parameters(required=5)])
        == "insufficient counter capacity: 5 required"
    )
    ctl.observe_allocation("uid-1", "n1", "frob", None)  # deallocated: room again
    assert ctl.allocate("n1", "frob", [counter.Parameters(required=5)]) == [
        counter.Allocation(instance="a", count=5)
    ]
    assert ctl.allocate("n2", "frob", [three]) == "no counter capacity published"


def test_counter_selector_and_overcommit() -> None:
    ctl = counter.CounterController()
    ctl.set_capacity(
        "n1", "frob", [counter_instance("n1", "a", 8, color="red"), counter_instance("n1", "b", 8)]
    )
    red = counter.Parameters(required=1, selector=LabelSelector(match_labels={"color": "red"}))
    assert ctl.allocate("n1", "frob", [red]) == [counter.Allocation(instance="a", count=1)]
    ctl.observe_allocation("u", "n1", "frob", counter.Allocation(instance="a", count=6))
    # the driver shrank the instance below what is allocated: over-committed, nothing more fits
    ctl.set_capacity("n1", "frob", [counter_instance("n1", "a", 2, color="red")])
    assert ctl.free("n1", "frob") == {"a": -4}
    assert isinstance(ctl.allocate("n1", "frob", [red]), str)


def test_partitions_two_dimensions_and_slots() -> None:
    ctl = partitions.PartitionController()
    cap = decode_model_object(partitions.Capacity, {"memory": "40Gi", "maxPartitions": 2, "computeUnits": 64})
    ctl.set_capacity("n1", "acc", [Instance(InstanceKey("n1", "acc", "gpu0"), cap)])
    ten = decode_model_object(partitions.Parameters, {"memory": "10Gi", "minComputeUnits": 32})
    first = ctl.allocate("n1", "acc", [ten])
    assert first == [partitions.Allocation(instance="gpu0", partition=0, memory=10 * 2**30)]
    assert not isinstance(first, str)
    ctl.observe_allocation("u1", "n1", "acc", first[0])
    second = ctl.allocate("n1", "acc", [ten])
    assert second == [partitions.Allocation(instance="gpu0", partition=1, memory=10 * 2**30)]
    assert not isinstance(second, str)
    ctl.observe_allocation("u2", "n1", "acc", second[0])
    # memory is left (20Gi) but both partition slots are taken
    assert ctl.allocate("n1", "acc", [ten]) == "no accelerator with a free partition of 10737418240 bytes"
    greedy = decode_model_object(partitions.Parameters, {"memory": "1Gi", "minComputeUnits": 33})
    ctl.observe_allocation("u2", "n1", "acc", None)
    assert isinstance(ctl.allocate("n1", "acc", [greedy]), str)  # 64 units / 2 partitions = 32


def test_model_decoding_errors() -> None:
    with pytest.raises(ModelDecodeError, match=r"Expected `int` >= 0 - at `\$.count`"):
        decode_model_object(counter.Capacity, {"count": -1})
    with pytest.raises(ModelDecodeError, match="memory: must be greater than zero"):
        decode_model_object(partitions.Parameters, {"memory": "0"})
    # Go's decoder ignores the case of field names (the KEP writes ``Required``)
    assert decode_model_object(counter.Parameters, {"Required": 2}).required == 2


THIRD_PARTY = """
from collections.abc import Sequence

import msgspec

from draflow.services.dra.numeric.model import BuiltinController, NumericModel


class Capacity(msgspec.Struct, frozen=True, kw_only=True):
    slots: int


class Parameters(msgspec.Struct, frozen=True, kw_only=True):
    slot: int


class Allocation(msgspec.Struct, frozen=True, kw_only=True):
    instance: str
    slot: int


class SlotController(BuiltinController[Capacity, Parameters, Allocation]):
    def allocate(self, node: str, driver: str, requests: Sequence[Parameters]) -> list[Allocation] | str:
        taken = {(a.instance, a.slot) for a in self.node_allocations(node, driver)}
        out = []
        for req in requests:
            inst = next((i for i in self.node_instances(node, driver)
                         if req.slot < i.capacity.slots and (i.key.id, req.slot) not in taken), None)
            if inst is None:
                return f"slot {req.slot} is not free"
            taken.add((inst.key.id, req.slot))
            out.append(Allocation(instance=inst.key.id, slot=req.slot))
        return out


MODEL = NumericModel(
    group="slots.example.com", versions=("v1",), capacity_kind="Capacity", capacity_type=Capacity,
    parameters_kind="Parameters", parameters_type=Parameters, allocation_kind="Allocation",
    allocation_type=Allocation, controller=SlotController,
)
"""


def install_third_party(root: Path, name: str, value: str) -> None:
    """A package on sys.path with its dist-info, as ``pip install`` leaves it."""
    (root / "slots_model.py").write_text(textwrap.dedent(THIRD_PARTY))
    info = root / "slots_model-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: slots-model\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[draflow.numeric_models]\n{name} = {value}\n")


def test_third_party_model_from_its_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_third_party(tmp_path, "slots.example.com", "slots_model:MODEL")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = load_models()
    assert registry.problems == []
    assert {"counter.dra.config.k8s.io", "partitions.dra.config.k8s.io", "slots.example.com"} <= set(
        registry.groups()
    )
    model = registry.for_api_version("slots.example.com/v1")
    assert model is not None and registry.for_api_version("slots.example.com/v2") is None
    ctl = model.controller()
    cap = decode_model_object(model.capacity_type, {"slots": 2})
    ctl.set_capacity("n", "d", [Instance(InstanceKey("n", "d", "x"), cap)])
    assert ctl.allocate("n", "d", [model.parameters_type(slot=1)]) == [
        model.allocation_type(instance="x", slot=1)
    ]


def test_broken_entry_point_is_reported_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_third_party(tmp_path, "wrong.example.com", "slots_model:MODEL")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = load_models()
    assert registry.problems == [
        "numeric model 'wrong.example.com' (slots_model:MODEL): declares group 'slots.example.com'"
    ]
    assert "counter.dra.config.k8s.io" in registry.groups()
