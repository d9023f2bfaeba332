"""Node lifecycle on the API side: the Lease kind (``kube-node-lease``) and the
DefaultTolerationSeconds admission plugin, pure and against a real apiserver."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from events.api.codec import decode_object
from events.api.core_v1 import Pod, PodSpec, Toleration
from events.api.meta import ObjectMeta
from infra.eventstore import EventStore
from services.apiserver.admission.tolerations import NOT_READY, UNREACHABLE, DefaultTolerationSeconds
from services.apiserver.server import ApiServer
from services.runtime.client import ApiClient

DEFAULTS = DefaultTolerationSeconds()


def toleration(key: str = "", effect: str = "", seconds: int | None = None) -> Toleration:
    return Toleration(key=key, operator="Exists", effect=effect, toleration_seconds=seconds)


def tolerations_after(*given: Toleration) -> list[tuple[str, str, int | None]]:
    pod = DEFAULTS.admit(Pod(metadata=ObjectMeta(name="p"), spec=PodSpec(tolerations=given)))
    return [(t.key, t.effect, t.toleration_seconds) for t in pod.spec.tolerations]


def test_every_pod_gets_the_not_ready_and_unreachable_tolerations() -> None:
    assert tolerations_after() == [(NOT_READY, "NoExecute", 300), (UNREACHABLE, "NoExecute", 300)]
    admitted = DEFAULTS.admit(Pod(metadata=ObjectMeta(name="p")))
    assert {t.operator for t in admitted.spec.tolerations} == {"Exists"}


def test_a_pod_that_says_otherwise_is_left_alone() -> None:
    # its own unreachable toleration (any effect matching NoExecute, any seconds) is kept as it is
    assert tolerations_after(toleration(UNREACHABLE, "NoExecute", 5)) == [
        (UNREACHABLE, "NoExecute", 5),
        (NOT_READY, "NoExecute", 300),
    ]
    assert tolerations_after(toleration(UNREACHABLE)) == [
        (UNREACHABLE, "", None),
        (NOT_READY, "NoExecute", 300),
    ]
    assert tolerations_after(toleration()) == [("", "", None)]  # tolerates everything
    # a NoSchedule toleration of the same key does not count
    assert (UNREACHABLE, "NoExecute", 300) in tolerations_after(toleration(UNREACHABLE, "NoSchedule"))
    custom = DefaultTolerationSeconds(not_ready_seconds=7, unreachable_seconds=3)
    pod = custom.admit(Pod(metadata=ObjectMeta(name="p")))
    assert [t.toleration_seconds for t in pod.spec.tolerations] == [7, 3]


def test_other_kinds_are_not_touched() -> None:
    ns = decode_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}})
    assert DEFAULTS.admit(ns) is ns


def pod_manifest(name: str, tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
async def short_api(event_store: EventStore) -> AsyncIterator[ApiClient]:
    """An apiserver started with --default-unreachable-toleration-seconds=5."""
    events = await EventStore.open(event_store.settings, "apiserver")
    server = ApiServer(events, tolerations=DefaultTolerationSeconds(unreachable_seconds=5))
    await server.start()
    client = await ApiClient.connect(event_store.settings, actor="test", timeout_s=10.0)
    try:
        yield client
    finally:
        await client.close()
        await server.stop()
        await events.close()


async def test_the_apiserver_admits_pods_with_the_default_tolerations(
    short_api: ApiClient, event_store: EventStore
) -> None:
    (created,) = await short_api.apply([pod_manifest("web")])
    assert created.error is None
    stored = (await short_api.get("Pod", "web"))["spec"]["tolerations"]
    assert stored == [
        {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
    ]
    # the same manifest again (without them) is unchanged: the plugin runs on updates too
    before = await event_store.stream_last_seq()
    (again,) = await short_api.apply([pod_manifest("web")])
    assert again.outcome == "unchanged" and await event_store.stream_last_seq() == before


def lease_manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, **spec},
    }


async def test_leases_are_served_in_kube_node_lease(api: ApiClient, event_store: EventStore) -> None:
    renew = "2026-01-01T00:00:00.123456Z"
    (created,) = await api.apply([lease_manifest("node-1", renewTime=renew)])
    assert created.error is None and created.namespace == "kube-node-lease"
    got = await api.get("leases", "node-1", namespace="kube-node-lease")
    assert got["apiVersion"] == "coordination.k8s.io/v1" and got["spec"]["renewTime"] == renew
    items, _ = await api.list("Lease", namespace="kube-node-lease")
    assert [i["metadata"]["name"] for i in items] == ["node-1"]
    before = await event_store.stream_last_seq()
    bad = [
        lease_manifest("zero", leaseDurationSeconds=0),
        lease_manifest("neg", leaseTransitions=-1),
        lease_manifest("when", renewTime="yesterday"),
        lease_manifest("who", preferredHolder="x"),
        lease_manifest("how", strategy="Newest"),
    ]
    results = await api.apply(bad)
    messages = [r.error.message if r.error else "" for r in results]
    assert messages[0].startswith('Lease.coordination.k8s.io "kube-node-lease/zero" is invalid: ')
    assert messages[0].endswith("spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0")
    assert "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0" in messages[1]
    assert 'spec.renewTime: Invalid value: "yesterday": must be an RFC 3339 timestamp' in messages[2]
    assert "spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined" in messages[3]
    assert (
        'spec.strategy.strategy: Unsupported value: "Newest": supported values: "OldestEmulationVersion"'
        in messages[4]
    )
    assert await event_store.stream_last_seq() == before  # refused: nothing appended
