"""The scheduler's slice snapshot after slice changes: updated for the changed slices only, and
always equal to one rebuilt from every slice."""

from __future__ import annotations

import random

import pytest

from draflow.events.api.resource_v1 import ResourceSlice
from draflow.services.dra.structured import Features, SliceCache, SliceSnapshot
from draflow.services.scheduler.framework import Reserved
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.plugins.dynamicresources import prebind_claim
from tests.builders import make_class, make_node, make_slice, pod_with_template_claim
from tests.builders.scheduler import gpu_cluster

pytestmark = pytest.mark.kep4381

FEATURES = Features()


def _names(slices: object) -> list[str]:
    return [s.name for s in slices]  # type: ignore[attr-defined]


def _same(incremental: SliceSnapshot, full: SliceSnapshot, nodes: list[str]) -> None:
    assert _names(incremental.slices) == _names(full.slices)
    assert {k: _names(v) for k, v in incremental.by_node.items()} == {
        k: _names(v) for k, v in full.by_node.items()
    }
    assert {k: _names(v) for k, v in incremental.by_pool.items()} == {
        k: _names(v) for k, v in full.by_pool.items()
    }
    assert _names(incremental.shared) == _names(full.shared)
    for node in nodes:
        labels = {"kubernetes.io/hostname": node}
        got, want = incremental.pools_for(node, labels, FEATURES), full.pools_for(node, labels, FEATURES)
        assert [d.id for d in got.candidates] == [d.id for d in want.candidates]


def _device_nodes(snap: SliceSnapshot) -> dict[object, str | None]:
    return {
        dev.id: slc.node_name or (dev.scope_node if slc.per_device else "") or None
        for slc in snap.slices
        for dev in slc.devices
    }


def test_random_slice_changes_match_a_full_rebuild() -> None:
    rng = random.Random(7)
    nodes = [f"n{i}" for i in range(12)]
    cluster = ClusterState()
    for node in nodes:
        cluster.upsert(make_node(node))
    generation = 1
    for step in range(300):
        name = f"s{rng.randrange(20)}"
        if rng.random() < 0.2:
            cluster.delete("ResourceSlice", "", name)
        else:
            generation += 1
            node = rng.choice(nodes)
            pool = rng.choice([node, f"{node}-b", "pool-x"]) if rng.random() < 0.3 else node
            count = 2 if pool == "pool-x" else 1
            devices = rng.randrange(1, 4)
            slc = make_slice(node, devices, pool=pool, name=name, generation=generation, count=count)
            cluster.upsert(slc)
        if step % 3:
            continue  # several changes may pile up before the next snapshot
        snap = cluster.devices.snapshot()
        full = SliceCache().snapshot(cluster._effective_slices())
        _same(snap, full, nodes)
        assert cluster.devices.device_node == _device_nodes(full)


class _Counting(ClusterState):
    """Counts full rebuilds (each lists every slice)."""

    def __init__(self) -> None:
        self.full = 0
        super().__init__()

    def _effective_slices(self) -> list[ResourceSlice]:
        self.full += 1
        return super()._effective_slices()


def test_a_republished_slice_does_not_rebuild_from_every_slice() -> None:
    """What keeps a slice change on a 5,000-node cluster from costing the cluster's size: after
    the first snapshot, node-local slice changes never list every slice again."""
    cluster = _Counting()
    cluster.upsert(make_class())
    for i in range(300):
        cluster.upsert(make_node(f"node-{i:03d}"))
        cluster.upsert(make_slice(f"node-{i:03d}", 4))
    cluster.devices.snapshot()
    assert cluster.full == 1
    for i in range(50):
        cluster.upsert(make_slice(f"node-{i:03d}", 4, generation=2))
        cluster.devices.snapshot()
    cluster.delete("ResourceSlice", "", "node-007-gpu.example.com")
    cluster.devices.snapshot()
    assert cluster.full == 1
    shared = make_slice(None, 2, name="shared-devices", all_nodes=True)
    cluster.upsert(shared)  # a slice for every node: everything may change, rebuilt from all
    cluster.devices.snapshot()
    assert cluster.full == 2


def test_decisions_after_incremental_updates_match_a_fresh_scheduler() -> None:
    """Slices republished (one node losing devices, one gaining) between decisions: the pods land
    where a scheduler that saw only the final slices puts them."""
    core = gpu_cluster(20, 4)
    core.schedule(pod_with_template_claim("warm")[0])  # builds the first snapshot
    for i in range(5):
        core.observe(make_slice(f"node-{i:03d}", 1, generation=2))
    core.observe(make_slice("node-019", 8, generation=2))
    fresh = gpu_cluster(20, 4)
    for i in range(5):
        fresh.observe(make_slice(f"node-{i:03d}", 1, generation=2))
    fresh.observe(make_slice("node-019", 8, generation=2))
    for n in range(12):
        pod, claim = pod_with_template_claim(f"p{n}")
        results = []
        for sched in (core, fresh):
            sched.observe(claim)
            result = sched.schedule(pod)
            assert isinstance(result, Reserved)
            sched.observe(prebind_claim(claim, result.claims[0]))
            results.append(result.node_name)
        assert results[0] == results[1]
