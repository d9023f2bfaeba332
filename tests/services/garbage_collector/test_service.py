"""The garbage collector service against a real apiserver on a real nats-server.

The cases of issue 13: a Node's ResourceSlice goes with the Node (cluster-scoped), a Pod's
ResourceClaim with the Pod (namespaced); an owner re-created under the same name does not keep
its predecessor's dependents; Foreground deletion keeps the owner until its blocking dependents
are gone; Orphan deletion leaves the dependents without the reference.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from draflow.events.objects import FOREGROUND_FINALIZER
from draflow.infra.config import Settings
from draflow.services.apiserver.server import ApiServer
from draflow.services.garbage_collector.service import GarbageCollectorService
from draflow.services.runtime.controller import Runtime
from tests.shells import Running, eventually, manifests, run, start_runtime

NODE = "apiVersion: v1\nkind: Node\nmetadata: {name: %s}\n"


def slice_manifest(name: str, node: Any, *, block: bool = True, finalizers: str = "[]") -> dict[str, Any]:
    meta = node.metadata
    (doc,) = manifests(
        f"""
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: {name}
  finalizers: {finalizers}
  ownerReferences:
  - {{apiVersion: v1, kind: Node, name: {meta.name}, uid: {meta.uid}, controller: true,
      blockOwnerDeletion: {str(block).lower()}}}
spec:
  driver: gpu.nvidia.com
  nodeName: {meta.name}
  pool: {{name: {meta.name}, generation: 1, resourceSliceCount: 1}}
  devices: [{{name: gpu-0}}]
"""
    )
    return doc


@pytest.fixture
async def gc_probe(apiserver: ApiServer, settings: Settings) -> AsyncIterator[tuple[Runtime, Running]]:
    gc, _ = await run(settings, "garbage-collector", GarbageCollectorService, resync_s=5.0)
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        yield probe, gc
    finally:
        await gc.stop()
        await probe.stop()
        await probe_events.close()


async def _apply(probe: Runtime, *docs: dict[str, Any]) -> None:
    for result in await probe.api.apply(list(docs)):
        assert result.error is None, result.error
    await probe.cache.wait_position(await probe.events.stream_last_seq())


async def _node(probe: Runtime, name: str) -> Any:
    await _apply(probe, *manifests(NODE % name))
    return probe.get("Node", "", name)


async def test_a_nodes_slice_goes_with_the_node(gc_probe: tuple[Runtime, Running]) -> None:
    probe, _ = gc_probe
    node = await _node(probe, "gh200-1")
    await _apply(probe, slice_manifest("gh200-1-gpu.nvidia.com", node))
    (res,) = await probe.api.delete([("Node", "", "gh200-1")])
    assert res.error is None
    await eventually(
        lambda: probe.get("ResourceSlice", "", "gh200-1-gpu.nvidia.com") is None, what="slice gone"
    )


async def test_a_pods_claim_goes_with_the_pod(gc_probe: tuple[Runtime, Running]) -> None:
    probe, _ = gc_probe
    await _apply(probe, *manifests("apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n"))
    await _apply(
        probe,
        *manifests(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team}\n"
            "spec: {containers: [{name: c, image: busybox}]}\n"
        ),
    )
    pod = probe.get("Pod", "team", "p")
    (claim,) = manifests(
        f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: p-gpu
  namespace: team
  ownerReferences: [{{apiVersion: v1, kind: Pod, name: p, uid: {pod.metadata.uid}, controller: true}}]
spec:
  devices:
    requests: [{{name: gpu, exactly: {{deviceClassName: gpu.example.com}}}}]
"""
    )
    await _apply(probe, claim)
    (res,) = await probe.api.delete([("Pod", "team", "p")])
    assert res.error is None
    await eventually(lambda: probe.get("ResourceClaim", "team", "p-gpu") is None, what="claim gone")


async def test_an_owner_recreated_under_its_name_does_not_keep_old_dependents(
    gc_probe: tuple[Runtime, Running],
) -> None:
    probe, gc = gc_probe
    old = await _node(probe, "n1")
    await _apply(probe, slice_manifest("n1-slice", old))
    await gc.stop()  # the owner goes and comes back while the collector is down
    (res,) = await probe.api.delete([("Node", "", "n1")])
    assert res.error is None
    new = await _node(probe, "n1")
    assert new.metadata.uid != old.metadata.uid
    settings = probe.events.settings
    gc2, _ = await run(settings, "garbage-collector-2", GarbageCollectorService, resync_s=5.0)
    try:
        await eventually(lambda: probe.get("ResourceSlice", "", "n1-slice") is None, what="old slice gone")
        assert probe.get("Node", "", "n1") is not None
    finally:
        await gc2.stop()


async def test_foreground_keeps_the_owner_until_blocking_dependents_are_gone(
    gc_probe: tuple[Runtime, Running],
) -> None:
    probe, _ = gc_probe
    node = await _node(probe, "n2")
    await _apply(probe, slice_manifest("n2-slice", node, finalizers="[example.com/hold]"))
    (res,) = await probe.api.delete([("Node", "", "n2")], propagation_policy="Foreground")
    assert res.error is None
    # the slice is being deleted (its own finalizer holds it); the Node waits for it
    held = await eventually(
        lambda: (s := probe.get("ResourceSlice", "", "n2-slice")) and s.metadata.deletion_timestamp and s,
        what="slice being deleted",
    )
    waiting = probe.get("Node", "", "n2")
    assert waiting is not None and waiting.metadata.deletion_timestamp is not None
    assert waiting.metadata.finalizers == (FOREGROUND_FINALIZER,)
    await probe.api.finalize("ResourceSlice", "n2-slice", remove=["example.com/hold"])
    await eventually(lambda: probe.get("Node", "", "n2") is None, what="node gone after its slice")
    assert held.metadata.uid  # the slice went first: the node waited for it
    # the order the log stored the two deletions in (a fold keeps no versions of deleted objects)
    slice_gone = await probe.events.last_record(probe.events.subject("ResourceSlice", None, "n2-slice"))
    node_gone = await probe.events.last_record(probe.events.subject("Node", None, "n2"))
    assert slice_gone is not None and node_gone is not None
    assert slice_gone.seq < node_gone.seq


async def test_orphan_leaves_the_dependents_without_the_reference(gc_probe: tuple[Runtime, Running]) -> None:
    probe, _ = gc_probe
    node = await _node(probe, "n3")
    await _apply(probe, slice_manifest("n3-slice", node))
    (res,) = await probe.api.delete([("Node", "", "n3")], propagation_policy="Orphan")
    assert res.error is None
    await eventually(lambda: probe.get("Node", "", "n3") is None, what="node gone")
    kept = probe.get("ResourceSlice", "", "n3-slice")
    assert kept is not None and kept.metadata.owner_references == ()
    assert kept.metadata.deletion_timestamp is None


async def test_an_unknown_propagation_policy_is_refused(gc_probe: tuple[Runtime, Running]) -> None:
    probe, _ = gc_probe
    from draflow.services.runtime.protocol import StatusError

    with pytest.raises(StatusError) as err:
        await probe.api.delete([("Node", "", "x")], propagation_policy="Sideways")
    assert err.value.status.message == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Sideways": '
        'supported values: "Foreground", "Background", "Orphan", "nil"'
    )
