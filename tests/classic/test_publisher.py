"""The ACME capacity publisher keeps one NodeGpuCapacity per labelled node in the log."""

from __future__ import annotations

from events.api import core_v1 as c1
from events.api.meta import ObjectMeta
from events.objects import object_applied
from services.drivers.acme_gpu.publisher import GPUS_LABEL, MEMORY_LABEL, CapacityPublisher, capacity_for
from services.runtime.controller import Runtime


def acme_node(name: str, **labels: str) -> c1.Node:
    return c1.Node(metadata=ObjectMeta(name=name, uid=f"uid-{name}", labels=labels))


def test_capacity_for_reads_the_labels() -> None:
    cap = capacity_for(acme_node("n1", **{GPUS_LABEL: "2", MEMORY_LABEL: "16384Mi"}))
    assert cap is not None
    assert [(g.name, g.memory) for g in cap.spec.gpus] == [("gpu-0", "16Gi"), ("gpu-1", "16Gi")]
    assert cap.spec.node_name == "n1"
    for labels in (
        {GPUS_LABEL: "2"},
        {GPUS_LABEL: "0", MEMORY_LABEL: "1Gi"},
        {GPUS_LABEL: "x", MEMORY_LABEL: "1Gi"},
    ):
        assert capacity_for(acme_node("n1", **labels)) is None
    assert capacity_for(acme_node("n1", **{GPUS_LABEL: "1", MEMORY_LABEL: "lots"})) is None


async def _pass(rt: Runtime, pub: CapacityPublisher) -> None:
    await rt.cache.wait_position(await rt.events.stream_last_seq())
    await pub.sync()
    await rt.cache.wait_position(await rt.events.stream_last_seq())


async def test_publisher_creates_updates_and_deletes(runtime: Runtime) -> None:
    pub = CapacityPublisher(runtime)
    store = runtime.events
    subject = store.subject("Node", None, "n1")
    await store.append(
        subject,
        object_applied(acme_node("n1", **{GPUS_LABEL: "1", MEMORY_LABEL: "8Gi"})),
        expected_last_seq=None,
    )
    await store.append(
        store.subject("Node", None, "plain"), object_applied(acme_node("plain")), expected_last_seq=None
    )
    await _pass(runtime, pub)
    cap = runtime.get("NodeGpuCapacity", "", "n1")
    assert cap is not None and [g.memory for g in cap.spec.gpus] == ["8Gi"]
    assert runtime.get("NodeGpuCapacity", "", "plain") is None
    seq = await store.stream_last_seq()
    await _pass(runtime, pub)
    assert await store.stream_last_seq() == seq  # nothing changed: nothing written

    await store.append(
        subject,
        object_applied(acme_node("n1", **{GPUS_LABEL: "2", MEMORY_LABEL: "8Gi"})),
        expected_last_seq=None,
    )
    await _pass(runtime, pub)
    cap = runtime.get("NodeGpuCapacity", "", "n1")
    assert cap is not None and len(cap.spec.gpus) == 2

    await store.append(subject, object_applied(acme_node("n1")), expected_last_seq=None)
    await _pass(runtime, pub)
    assert runtime.get("NodeGpuCapacity", "", "n1") is None
