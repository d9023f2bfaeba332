"""NodeRestriction, enforced where no kubelet can get around it: the subject says which node asks.

A kubelet's credential may publish only on ``draflow.node.<its node>.<verb>`` (nats-server refuses
anything else, ``test_permissions``), so when the apiserver gets a request there it knows the node
as surely as Kubernetes knows ``system:node:<name>`` from a client certificate. Here the real
apiserver runs with its own credential on an authenticated server; kubelet-node-2 tries to change
what belongs to node-1 and gets Kubernetes' 403s, and nothing is appended; node-1 may.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
import yaml

from draflow.events.api.resource_v1 import ResourceClaimConsumerReference
from draflow.events.dra import (
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodBound,
    PodStarted,
)
from draflow.infra.eventstore import EventStore, new_id
from draflow.infra.nats_client import connect
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import AppendEventsRequest, StatusError
from tests.helpers import assert_eventually
from tests.paths import ROOT
from tests.security.system import SecuredServer

CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "gpu", "namespace": "default"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
}


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


class Cluster:
    """The apiserver, a scheduler's event store, the CLI and two kubelets' API clients."""

    def __init__(self, secured: SecuredServer) -> None:
        self.secured = secured
        self.clients: list[ApiClient] = []
        self.stores: list[EventStore] = []

    async def start(self) -> None:
        self.apiserver_events = await EventStore.open(self.secured.as_role("apiserver"), "apiserver")
        self.stores.append(self.apiserver_events)
        self.apiserver = ApiServer(self.apiserver_events)
        await self.apiserver.start()
        self.scheduler = await EventStore.open(self.secured.as_role("scheduler"), "scheduler")
        self.stores.append(self.scheduler)
        self.cli = await ApiClient.connect(self.secured.as_role("cli"), actor="draflow")
        self.clients.append(self.cli)
        self.node1 = await self.kubelet("node-1")
        self.node2 = await self.kubelet("node-2")

    async def kubelet(self, node: str) -> ApiClient:
        settings = self.secured.as_role(f"kubelet-{node}")
        nc = await connect(settings, f"kubelet-{node}", connect_timeout_s=10)
        client = ApiClient(nc, settings, actor=f"kubelet/{node}", node=node, timeout_s=10)
        client._own_connection = True
        self.clients.append(client)
        return client

    async def stop(self) -> None:
        for client in self.clients:
            await client.close()
        await self.apiserver.stop()
        for store in self.stores:
            await store.close()

    async def bound_pod(self, name: str, node: str) -> str:
        """A pod applied through the API and bound by the scheduler; returns its uid."""
        (result,) = await self.cli.apply([pod(name)])
        assert result.error is None, result.error
        subject = self.scheduler.subject("Pod", "default", name)
        await self.scheduler.append(subject, PodBound(node_name=node), expected_last_seq=None)
        got = await self.cli.get("Pod", name, namespace="default")
        await self.wait_bound(name, node)
        return str(got["metadata"]["uid"])

    async def wait_bound(self, name: str, node: str) -> None:
        async def bound() -> bool:
            got = await self.cli.get("Pod", name, namespace="default")
            return bool(got["spec"].get("nodeName") == node)

        await assert_eventually(bound)

    async def version(self, kind: str, name: str, namespace: str = "default") -> int:
        return await self.scheduler.last_seq(self.scheduler.subject(kind, namespace or None, name))


@pytest.fixture
async def cluster(secured: SecuredServer) -> AsyncIterator[Cluster]:
    c = Cluster(secured)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def refused(call: Any) -> str:
    with pytest.raises(StatusError) as info:
        await call
    assert info.value.status.code == 403 and info.value.status.reason == "Forbidden", info.value.status
    return info.value.status.message


async def test_a_kubelet_cannot_forge_another_nodes_pod_status(cluster: Cluster) -> None:
    await cluster.bound_pod("on-one", "node-1")
    before = await cluster.version("Pod", "on-one")
    message = await refused(
        cluster.node2.append_events(
            "Pod", "default", "on-one", [PodStarted(at=now())], expected_last_seq=before, msg_id=new_id()
        )
    )
    assert message == (
        'pods "on-one" is forbidden: node "node-2" can only update pod status for pods with '
        "spec.nodeName set to itself"
    )
    assert await cluster.version("Pod", "on-one") == before  # nothing appended
    # the pod's own node may, and the log names it as the actor
    seq = await cluster.node1.append_events(
        "Pod", "default", "on-one", [PodStarted(at=now())], expected_last_seq=before, msg_id=new_id()
    )
    last = await cluster.scheduler.last(cluster.scheduler.subject("Pod", "default", "on-one"))
    assert last is not None and last.seq == seq and last.actor == "kubelet-node-1"
    assert isinstance(last.data, PodStarted)


async def test_a_kubelet_cannot_touch_another_node_or_its_lease(cluster: Cluster) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}
    assert (await cluster.node1.apply([node]))[0].error is None
    message = await refused(cluster.node2.update_status("Node", "node-1", {"phase": "Running"}))
    assert message == 'nodes "node-1" is forbidden: node "node-2" is not allowed to modify node "node-1"'
    message = await refused(cluster.node2.apply([node]))
    assert message == 'nodes "node-1" is forbidden: node "node-2" is not allowed to modify node "node-1"'
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "node-1", "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": "node-1"},
    }
    message = await refused(cluster.node2.apply([lease]))
    assert message == (
        'leases.coordination.k8s.io "node-1" is forbidden: can only access node lease with the same name '
        "as the requesting node"
    )
    assert (await cluster.node1.apply([lease]))[0].error is None


async def test_a_kubelet_cannot_delete_pods_bound_elsewhere_nor_create_pods(cluster: Cluster) -> None:
    await cluster.bound_pod("stays", "node-1")
    message = await refused(cluster.node2.delete([("Pod", "default", "stays")], grace_period_seconds=0))
    assert message == (
        'pods "stays" is forbidden: node "node-2" can only delete pods with spec.nodeName set to itself'
    )
    assert await cluster.cli.get("Pod", "stays", namespace="default")
    message = await refused(cluster.node2.apply([pod("mine-now")]))
    assert message == (
        'pods "mine-now" is forbidden: User "system:node:node-2" cannot update resource "pods" in API group '
        '"" in the namespace "default"'
    )
    slice_ = yaml.safe_load((ROOT / "examples/extended-resources/resourceslice.yaml").read_text())
    slice_["spec"]["nodeName"] = "node-1"
    message = await refused(cluster.node2.apply([slice_]))
    assert message.endswith(
        "can only create ResourceSlice with the same NodeName as the requesting node, "
        "expected node-2, got node-1"
    )


async def test_a_kubelet_releases_only_its_own_pods_reservations(cluster: Cluster) -> None:
    classes = yaml.safe_load((ROOT / "examples/dra-example-driver/deviceclass.yaml").read_text())
    await cluster.cli.apply([classes, CLAIM])
    uid = await cluster.bound_pod("user", "node-1")
    subject = cluster.scheduler.subject("ResourceClaim", "default", "gpu")
    consumer = ResourceClaimConsumerReference(resource="pods", name="user", uid=uid)
    await cluster.scheduler.append(subject, ClaimReserved(consumer=consumer), expected_last_seq=None)
    version = await cluster.scheduler.last_seq(subject)
    await cluster.wait_bound("user", "node-1")

    async def reserved() -> bool:
        got = await cluster.cli.get("ResourceClaim", "gpu", namespace="default")
        return bool(got.get("status", {}).get("reservedFor"))

    await assert_eventually(reserved)
    release = [ClaimReservationsReleased(uids=(uid,)), ClaimDeallocated(reason="NoConsumers")]
    message = await refused(
        cluster.node2.append_events(
            "ResourceClaim", "default", "gpu", release, expected_last_seq=version, msg_id=new_id()
        )
    )
    assert message == (
        'resourceclaims.resource.k8s.io "gpu" is forbidden: node "node-2" can only release reservations of '
        "pods bound to itself"
    )
    assert await cluster.scheduler.last_seq(subject) == version
    await cluster.node1.append_events(
        "ResourceClaim", "default", "gpu", release, expected_last_seq=version, msg_id=new_id()
    )
    assert await cluster.scheduler.last_seq(subject) == version + 2


async def test_events_of_other_services_are_not_a_kubelets(cluster: Cluster) -> None:
    """A kubelet may append the facts it observes, not decisions of the scheduler."""
    await cluster.bound_pod("mine", "node-1")
    version = await cluster.version("Pod", "mine")
    message = await refused(
        cluster.node1.append_events(
            "Pod",
            "default",
            "mine",
            [PodBound(node_name="node-1")],
            expected_last_seq=version,
            msg_id=new_id(),
        )
    )
    assert 'User "system:node:node-1" cannot update resource "pods"' in message
    raw = msgspec.to_builtins(PodStarted(at=now()))
    raw["type"] = "NoSuchEvent"
    with pytest.raises(StatusError) as info:
        await cluster.node1.request(
            "append", AppendEventsRequest(kind="Pod", name="mine", namespace="default", events=[raw])
        )
    assert info.value.status.code == 400
