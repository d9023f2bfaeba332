"""frobnicator.example.com's node plugin: the capacity it reports and prepare's double check."""

from __future__ import annotations

from pathlib import Path

import pytest

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.meta import ObjectMeta
from draflow.projections.numeric import node_selector_for
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers.cdi import read_spec
from draflow.services.drivers.frobnicator import DRIVER_NAME
from draflow.services.drivers.frobnicator.node import FrobnicatorNodePlugin

pytestmark = pytest.mark.kep4381


def allocated(
    name: str, count: int, *, node: str = "node-1", instance: str = "frobnicators"
) -> cv.ResourceClaim:
    alloc = cv.NumericAllocation(
        node_name=node,
        driver_name=DRIVER_NAME,
        api_version="counter.dra.config.k8s.io/v1alpha1",
        kind="Allocation",
        data={"instance": instance, "count": count},
        parameters={"spec": {"numberOfFrobnicators": count, "env": {"MODE": "fast"}}},
    )
    status = cv.ResourceClaimStatus(
        phase=cv.ALLOCATED,
        driver_name=DRIVER_NAME,
        numeric_allocation=alloc,
        scheduling=cv.SchedulingStatus(
            driver=cv.DriverSchedulingStatus(available_on_nodes=node_selector_for(node))
        ),
    )
    return cv.ResourceClaim(
        metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"), status=status
    )


def ref(claim: cv.ResourceClaim) -> ClaimRef:
    return ClaimRef(namespace="default", name=claim.metadata.name, uid=claim.metadata.uid)


def test_capacity_from_the_node_label_and_changes() -> None:
    plugin = FrobnicatorNodePlugin(
        node_name="node-1", node_labels={"frobnicator.example.com/frobnicators": "8"}
    )
    (inst,) = plugin.capacity()
    assert (inst.id, inst.api_version, inst.kind, inst.data) == (
        "frobnicators",
        "counter.dra.config.k8s.io/v1alpha1",
        "Capacity",
        {"count": 8},
    )
    generation = plugin.generation
    plugin.set_frobnicators(8)
    assert plugin.generation == generation
    plugin.set_frobnicators(0)
    assert plugin.generation == generation + 1 and plugin.capacity() == ()


def test_prepare_gives_env_and_double_checks_capacity(tmp_path: Path) -> None:
    plugin = FrobnicatorNodePlugin(node_name="node-1", node_labels={}, frobnicators=4, cdi_root=tmp_path)
    three, two = allocated("three", 3), allocated("two", 2)
    for c in (three, two):
        plugin.observe(c)
    (result,) = plugin.node_prepare_resources([ref(three)]).values()
    assert not result.error
    spec = read_spec(tmp_path, "frobnicator.example.com-frobnicator_uid-three")
    assert spec is not None
    env = spec["devices"][0]["containerEdits"]["env"]
    assert env == ["FROBNICATORS=3", "FROBNICATOR_INSTANCE=frobnicators", "MODE=fast"]
    # the scheduler over-committed (the capacity shrank meanwhile): only 1 of 4 is left
    (refused,) = plugin.node_prepare_resources([ref(two)]).values()
    assert refused.error == (
        "resource claim default/two: 2 frobnicators allocated but only 1 of 4 are left on node-1"
    )
    plugin.node_unprepare_resources([ref(three)])
    (ok,) = plugin.node_prepare_resources([ref(two)]).values()
    assert not ok.error
    plugin.set_frobnicators(0)  # the instance vanished: a new claim waits, prepared ones stay
    gone = allocated("gone", 1)
    plugin.observe(gone)
    (vanished,) = plugin.node_prepare_resources([ref(gone)]).values()
    assert (
        vanished.error
        == "resource claim default/gone: frobnicator instance 'frobnicators' is gone from node-1"
    )
    assert not plugin.node_prepare_resources([ref(two)])[two.metadata.uid].error
