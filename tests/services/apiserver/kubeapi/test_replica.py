"""An apiserver replica serving only the Kubernetes API (``--kube-api-only``): it takes no NATS
requests, forwards its writes to the control plane's apiserver (one admission, one quota decision),
and reads as fresh as the log."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator

import pytest

from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.apiserver.kubeapi.server import KubeApi
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import StatusError
from tests.helpers import assert_eventually
from tests.processes import Proc
from tests.services.apiserver.kubeapi.conftest import Kube, http, kubectl, list_rv, serving, watching
from tests.shells import apiserver_in_process


def pod(name: str, image: str = "busybox") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": image}]},
    }


@pytest.fixture
async def replica(apiserver: ApiServer, settings: Settings) -> AsyncIterator[tuple[ApiServer, Kube]]:
    """The control plane's apiserver (the ``apiserver`` fixture) and a replica beside it, with the
    Kubernetes API served by the replica only."""
    async with (
        apiserver_in_process(settings, "kube-replica", requests=False) as server,
        serving(server, settings) as kube,
    ):
        yield server, kube


async def test_reads_what_the_control_plane_just_wrote(
    replica: tuple[ApiServer, Kube], api: ApiClient
) -> None:
    _, kube = replica
    for i in range(20):  # each read right after the write: no wait for the replica's follower
        (result,) = await api.apply([pod(f"p{i}")])
        assert result.error is None, result.error
        code, body = await http(kube, "GET", f"/api/v1/namespaces/default/pods/p{i}")
        assert code == 200, body
        listed = json.loads((await http(kube, "GET", "/api/v1/namespaces/default/pods"))[1])
        assert len(listed["items"]) == i + 1
        assert int(listed["metadata"]["resourceVersion"]) >= int(result.resource_version)


async def test_its_watchers_see_the_control_planes_writes_in_order(
    replica: tuple[ApiServer, Kube], api: ApiClient
) -> None:
    _, kube = replica
    rv = await list_rv(kube, "/api/v1/namespaces/default/pods")
    async with watching(kube, f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}") as events:
        for i in range(3):
            (result,) = await api.apply([pod(f"w{i}")])
            assert result.error is None, result.error
        (deleted,) = await api.delete([("Pod", "default", "w1")], grace_period_seconds=0)
        assert deleted.error is None, deleted.error
        await assert_eventually(lambda: len(events) == 4)
    seen = [(e["type"], e["object"]["metadata"]["name"]) for e, _ in events]
    assert seen == [("ADDED", "w0"), ("ADDED", "w1"), ("ADDED", "w2"), ("DELETED", "w1")]


async def test_a_replica_behind_the_log_says_so_instead_of_answering_stale(
    replica: tuple[ApiServer, Kube], api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, kube = replica
    await server.store.stop()  # its follower stops: the replica falls behind the log
    (result,) = await api.apply([pod("late")])
    assert result.error is None, result.error
    monkeypatch.setattr(KubeApi, "fresh_timeout_s", 0.2)
    for path in ("/api/v1/namespaces/default/pods/late", "/api/v1/namespaces/default/pods"):
        code, body = await http(kube, "GET", path)
        assert code == 504, body
        status = json.loads(body)
        assert status["reason"] == "Timeout" and "the log is at" in status["message"]


async def test_writes_go_through_admission_and_reach_the_control_plane(
    replica: tuple[ApiServer, Kube], api: ApiClient, apiserver: ApiServer
) -> None:
    _, kube = replica
    created = await kubectl(kube, "create", "-f", "-", stdin=json.dumps(pod("web")))
    assert "pod/web created" in created.out
    got = await api.get("Pod", "web", namespace="default")
    assert got["metadata"]["uid"]
    # forwarded for the user who made it: the control plane appended it in the admin's name
    last = await apiserver.events.last(apiserver.store.subject("Pod", "default", "web"))
    assert last is not None and last.actor == "user:admin"
    refused = await kubectl(kube, "create", "-f", "-", stdin=json.dumps(pod("bad", image="")), check=False)
    assert refused.rc != 0
    assert 'The Pod "bad" is invalid' in refused.err and "spec.containers[0].image" in refused.err
    with pytest.raises(StatusError) as missing:
        await api.get("Pod", "bad", namespace="default")
    assert missing.value.status.code == 404


async def test_quota_is_decided_by_the_control_plane_once_for_both_apis(
    replica: tuple[ApiServer, Kube], api: ApiClient
) -> None:
    """A pod through the NATS API and one through kubectl on the replica count against the same
    ResourceQuota, decided under the control plane's one write lock."""
    _, kube = replica
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "two", "namespace": "default"},
        "spec": {"hard": {"pods": "2"}},
    }
    (result,) = await api.apply([quota])
    assert result.error is None, result.error
    created = await asyncio.gather(
        api.apply([pod("nats-0")]),
        api.apply([pod("nats-1")]),
        kubectl(kube, "create", "-f", "-", stdin=json.dumps(pod("kube-0")), check=False),
        kubectl(kube, "create", "-f", "-", stdin=json.dumps(pod("kube-1")), check=False),
    )
    admitted = [r[0].error is None for r in created[:2]] + [r.rc == 0 for r in created[2:]]
    assert sum(admitted) == 2, created
    listed = json.loads((await http(kube, "GET", "/api/v1/namespaces/default/pods"))[1])
    assert len(listed["items"]) == 2


async def test_a_replica_without_a_control_plane_refuses_writes_and_still_reads(
    settings: Settings, event_store: EventStore
) -> None:
    """Nothing but the control plane's apiserver admits a write: with none answering, the
    replica says so (503) and appends nothing; its reads go on."""
    async with (
        apiserver_in_process(settings, "kube-replica", requests=False) as server,
        serving(server, settings) as kube,
    ):
        assert kube.server.control_plane is not None
        kube.server.control_plane.wait_for_server_s = 0.3
        before = await event_store.stream_last_seq()
        code, body = await http(
            kube, "POST", "/api/v1/namespaces/default/pods", body=json.dumps(pod("orphan")).encode()
        )
        assert code == 503, body
        status = json.loads(body)
        assert status["reason"] == "ServiceUnavailable" and "no apiserver answers" in status["message"]
        assert await event_store.stream_last_seq() == before
        code, body = await http(kube, "GET", "/api/v1/namespaces")
        assert code == 200, body


def test_the_process_serves_only_the_kubernetes_api(settings: Settings, event_store: EventStore) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    proc = Proc(
        settings, "draflow.services.apiserver", ["--kube-api", f"127.0.0.1:{port}", "--kube-api-only"]
    )
    try:
        proc.expect(f"apiserver: Kubernetes API on https://127.0.0.1:{port}", timeout_s=60)
        assert f"server: https://127.0.0.1:{port}" in (settings.data_dir / "kubeconfig").read_text()
    finally:
        assert proc.terminate() == 0
    printed = []
    while not proc.lines.empty():
        printed.append(proc.lines.get())
    assert not any(line.startswith("apiserver: serving") for line in printed), printed


def test_a_replica_whose_port_is_taken_stops_with_one_line(
    settings: Settings, event_store: EventStore
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = Proc(
            settings, "draflow.services.apiserver", ["--kube-api", f"127.0.0.1:{port}", "--kube-api-only"]
        )
        assert proc.wait(60) == 2
    errors = [line for line in proc.stderr if "cannot serve the Kubernetes API" in line]
    assert len(errors) == 1, proc.stderr
    assert not any("Traceback" in line for line in proc.stderr)


def test_a_replica_with_the_kubernetes_api_off_has_nothing_to_serve(settings: Settings) -> None:
    proc = Proc(settings, "draflow.services.apiserver", ["--kube-api-only"], DRAFLOW_KUBE_API="off")
    assert proc.wait(60) == 2
    assert any("--kube-api-only with the Kubernetes API off: nothing to serve" in ln for ln in proc.stderr)
