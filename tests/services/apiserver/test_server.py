"""The apiserver against a real nats-server: apply, reads, deletion, status, conflicts, restart."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from draflow.events.api import resource_v1 as r1
from draflow.events.api.codec import object_meta
from draflow.events.objects import KubeEventRecorded
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import StatusError
from tests.helpers import assert_eventually
from tests.services.apiserver.test_fold import ClaimLabelled


def claim(name: str, namespace: str = "", **meta: Any) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, **meta}
    if namespace:
        md["namespace"] = namespace
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": md,
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
        },
    }


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


async def last_seq(events: EventStore) -> int:
    return await events.stream_last_seq()


async def test_apply_creates_configures_and_leaves_unchanged(api: ApiClient, event_store: EventStore) -> None:
    (created,) = await api.apply([claim("a")])
    assert (created.outcome, created.namespace, created.error) == ("created", "default", None)
    obj = await api.get("ResourceClaim", "a")
    meta = obj["metadata"]
    assert meta["resourceVersion"] == created.resource_version and meta["generation"] == 1
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    # defaulted as the API server does
    assert obj["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] == "ExactCount"

    before = await last_seq(event_store)
    (same,) = await api.apply([claim("a")])
    assert same.outcome == "unchanged" and await last_seq(event_store) == before  # nothing appended

    (labelled,) = await api.apply([claim("a", labels={"team": "ml"})])
    assert labelled.outcome == "configured"
    obj = await api.get("ResourceClaim", "a")
    assert obj["metadata"]["labels"] == {"team": "ml"} and obj["metadata"]["generation"] == 1
    assert obj["metadata"]["uid"] == meta["uid"]


async def test_rejections_append_nothing_and_name_the_field(api: ApiClient, event_store: EventStore) -> None:
    before = await last_seq(event_store)
    bad_count = claim("b")
    bad_count["spec"]["devices"]["requests"][0]["exactly"]["count"] = -1
    results = await api.apply(
        [
            bad_count,
            claim("c", "missing-ns"),
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {"restartpolicy": "Never"},
            },
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomain",
                "metadata": {"name": "cd"},
            },
            {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"generateName": "x-"}},
        ]
    )
    errors = [r.error for r in results]
    assert all(e is not None for e in errors)
    assert errors[0].reason == "Invalid" and "spec.devices.requests[0].exactly.count" in errors[0].message  # type: ignore[union-attr]
    assert errors[0].message.startswith('ResourceClaim.resource.k8s.io "default/b" is invalid: ')  # type: ignore[union-attr]
    assert (errors[1].code, errors[1].message) == (404, 'namespaces "missing-ns" not found')  # type: ignore[union-attr]
    assert errors[2].reason == "BadRequest" and 'unknown field "spec.restartpolicy"' in errors[2].message  # type: ignore[union-attr]
    assert errors[3].reason == "NoKindMatch" and 'no matches for kind "ComputeDomain"' in errors[3].message  # type: ignore[union-attr]
    assert "cannot use generate name with apply" in errors[4].message  # type: ignore[union-attr]
    assert await last_seq(event_store) == before


async def test_namespace_in_the_same_request_is_usable(api: ApiClient) -> None:
    results = await api.apply([namespace("team-a"), claim("x", "team-a"), claim("x", "team-a")])
    assert [r.outcome for r in results] == ["created", "created", "unchanged"]
    items, _ = await api.list("ResourceClaim", namespace="team-a")
    assert [i["metadata"]["name"] for i in items] == ["x"]


async def test_list_by_namespace_all_namespaces_labels_and_pages(api: ApiClient) -> None:
    await api.apply([namespace("n1"), namespace("n2")])
    docs = [claim(f"c{i:03d}", "n1" if i % 2 else "n2", labels={"parity": str(i % 2)}) for i in range(120)]
    assert all(r.error is None for r in await api.apply(docs))
    n1, rv = await api.list("ResourceClaim", namespace="n1")
    assert len(n1) == 60 and rv > 0
    everything, _ = await api.list("ResourceClaim", namespace=None)
    assert len(everything) == 120
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in everything] == sorted(
        (d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs
    )
    odd, _ = await api.list("ResourceClaim", namespace=None, label_selector="parity in (1)")
    assert len(odd) == 60 and {o["metadata"]["namespace"] for o in odd} == {"n1"}
    named, _ = await api.list("ResourceClaim", namespace=None, field_selector="metadata.name=c007")
    assert [o["metadata"]["name"] for o in named] == ["c007"]
    pages: list[str] = []
    token = ""
    while True:
        from draflow.services.runtime.protocol import ListRequest

        reply = await api.request(
            "list", ListRequest(kind="resourceclaims", namespace=None, limit=50, continue_=token)
        )
        pages.extend(o["metadata"]["name"] for o in reply.items or [])
        if not reply.continue_:
            break
        token = reply.continue_
    assert len(pages) == 120 and len(set(pages)) == 120


async def test_create_with_generate_name_and_already_exists(api: ApiClient) -> None:
    doc = claim("", generateName="pod-gpu-")
    del doc["metadata"]["name"]
    first, second = await api.apply([doc, doc], create_only=True)
    assert first.name.startswith("pod-gpu-") and len(first.name) == len("pod-gpu-") + 5
    assert second.name != first.name and second.outcome == "created"
    (dup,) = await api.apply([claim(first.name)], create_only=True)
    assert dup.error is not None and dup.error.reason == "AlreadyExists"


async def test_delete_honours_finalizers(api: ApiClient) -> None:
    await api.apply([claim("held", finalizers=["example.com/protect"])])
    (res,) = await api.delete([("ResourceClaim", "default", "held")])
    assert res.outcome == "deleted"
    obj = await api.get("ResourceClaim", "held")
    assert obj["metadata"]["deletionTimestamp"] and obj["metadata"]["finalizers"] == ["example.com/protect"]
    with pytest.raises(StatusError, match="no new finalizers can be added"):
        await api.finalize("ResourceClaim", "held", add=["example.com/other"])
    assert await api.finalize("ResourceClaim", "held", remove=["example.com/protect"]) is None
    with pytest.raises(StatusError) as err:
        await api.get("ResourceClaim", "held")
    assert (
        err.value.status.code == 404
        and err.value.status.message == 'resourceclaims.resource.k8s.io "held" not found'
    )
    (again,) = await api.delete([("ResourceClaim", "default", "held")])
    assert again.error is not None and again.error.code == 404
    # the name can be used again: the create expects the tombstone's version
    (recreated,) = await api.apply([claim("held")])
    assert recreated.outcome == "created"


async def test_a_request_deleting_many_objects_answers_each_in_order(api: ApiClient) -> None:
    """The deletions of one request's independent objects are written side by side; each item
    still gets its own answer, in the request's order (an unknown name is a 404 among them, a
    finalizer keeps its object Terminating), and an object named twice is deleted one item after
    the other, as before."""
    await api.apply([claim(f"c{i}") for i in range(6)] + [claim("held", finalizers=["example.com/p"])])
    names = ["c0", "missing", "c1", "held", "c2", "c3"]
    results = await api.delete([("ResourceClaim", "default", n) for n in names])
    assert [r.name for r in results] == names
    assert [r.error.code if r.error else r.outcome for r in results] == [
        "deleted",
        404,
        "deleted",
        "deleted",
        "deleted",
        "deleted",
    ]
    items, _ = await api.list("ResourceClaim", namespace="default")
    left = {o["metadata"]["name"] for o in items}
    assert left == {"c4", "c5", "held"}
    twice = await api.delete([("ResourceClaim", "default", "c4"), ("ResourceClaim", "default", "c4")])
    assert [r.error.code if r.error else r.outcome for r in twice] == ["deleted", 404]


async def test_status_writes_use_optimistic_concurrency(api: ApiClient, event_store: EventStore) -> None:
    await api.apply([claim("s")])
    rv = (await api.get("ResourceClaim", "s"))["metadata"]["resourceVersion"]
    status = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "d"}]
            }
        }
    }
    updated = await api.update_status("ResourceClaim", "s", status, resource_version=rv)
    assert updated is not None and updated["status"] == status
    before = await last_seq(event_store)
    with pytest.raises(StatusError) as err:
        await api.update_status("ResourceClaim", "s", {}, resource_version=rv)  # stale
    assert err.value.status.code == 409 and "the object has been modified" in err.value.status.message
    assert await last_seq(event_store) == before
    with pytest.raises(StatusError) as invalid:
        await api.update_status("ResourceClaim", "s", {"reservedFor": "nope"})
    assert (
        invalid.value.status.reason == "BadRequest" and "status.reservedFor" in invalid.value.status.message
    )
    with pytest.raises(StatusError) as no_status:
        await api.update_status("DeviceClass", "x", {})
    assert no_status.value.status.code == 404


async def test_pod_extended_resource_claim_status_is_validated_on_status_writes(
    api: ApiClient, event_store: EventStore
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ext", "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {"example.com/gpu": 1}}}
            ]
        },
    }
    (created,) = await api.apply([pod])
    assert created.error is None
    good = {
        "extendedResourceClaimStatus": {
            "resourceClaimName": "ext-extended-resources-abcde",
            "requestMappings": [
                {
                    "containerName": "main",
                    "resourceName": "example.com/gpu",
                    "requestName": "container-0-request-0",
                }
            ],
        }
    }
    updated = await api.update_status("Pod", "ext", good, namespace="default")
    assert (
        updated is not None
        and updated["status"]["extendedResourceClaimStatus"] == good["extendedResourceClaimStatus"]
    )
    before = await last_seq(event_store)
    bad = {
        "extendedResourceClaimStatus": {
            "resourceClaimName": "ext-extended-resources-abcde",
            "requestMappings": [
                {"containerName": "other", "resourceName": "example.com/gpu", "requestName": "r0"}
            ],
        }
    }
    with pytest.raises(StatusError) as err:
        await api.update_status("Pod", "ext", bad, namespace="default")
    assert err.value.status.code == 422
    assert (
        'status.extendedResourceClaimStatus.requestMappings[0].containerName: Invalid value: "other"'
        in err.value.status.message
    ), err.value.status.message
    assert await last_seq(event_store) == before


async def test_controller_appends_show_up_and_stale_writes_conflict(
    api: ApiClient, apiserver: ApiServer, event_store: EventStore
) -> None:
    await api.apply([claim("d")])
    obj = await api.get_object("ResourceClaim", "d")
    assert isinstance(obj, r1.ResourceClaim)
    subject = event_store.subject("ResourceClaim", "default", "d")
    rv = int(obj.metadata.resource_version)
    (seq,) = await event_store.append(subject, ClaimLabelled(key="owner", value="ctrl"), expected_last_seq=rv)

    async def seen() -> bool:
        got = await api.get("ResourceClaim", "d")
        assert got["metadata"]["resourceVersion"] == str(seq)
        return got["metadata"]["labels"] == {"owner": "ctrl"}

    await assert_eventually(seen)
    # a client still holding the old resourceVersion is refused
    with pytest.raises(StatusError) as err:
        await api.finalize("ResourceClaim", "d", add=["a.b/c"], resource_version=str(rv))
    assert err.value.status.reason == "Conflict"


async def test_server_decides_again_after_a_conflict_it_did_not_see(
    api: ApiClient, apiserver: ApiServer, event_store: EventStore
) -> None:
    await api.apply([claim("e")])
    store = apiserver.store
    await store.stop()  # stop following: the next controller append stays unseen
    obj = store.index.get("ResourceClaim", "default", "e")
    assert obj is not None
    subject = event_store.subject("ResourceClaim", "default", "e")
    await event_store.append(
        subject, ClaimLabelled(key="k", value="v"), expected_last_seq=int(object_meta(obj).resource_version)
    )
    await store.start()
    (res,) = await api.apply([claim("e", annotations={"note": "x"})])
    assert res.outcome == "configured"
    got = await api.get("ResourceClaim", "e")
    assert got["metadata"]["annotations"] == {"note": "x"}


async def test_kubernetes_events_are_recorded_and_aggregated(api: ApiClient, event_store: EventStore) -> None:
    await api.apply([claim("ev")])
    first = await api.record_event(
        "ResourceClaim", "ev", "Allocated", "gpu-0 on node-1", component="scheduler"
    )
    second = await api.record_event(
        "ResourceClaim", "ev", "Allocated", "gpu-0 on node-1", component="scheduler"
    )
    assert (
        first and second and second["count"] == 2 and first["metadata"]["name"] == second["metadata"]["name"]
    )
    await api.record_event("ResourceClaim", "ev", "Failed", "oops", type_="Warning")
    items, _ = await api.list(
        "Event", namespace="default", field_selector="involvedObject.name=ev,type=Warning"
    )
    assert [(i["reason"], i["involvedObject"]["kind"]) for i in items] == [("Failed", "ResourceClaim")]
    with pytest.raises(StatusError, match="Unsupported value"):
        await api.record_event("ResourceClaim", "ev", "X", "y", type_="Bad")
    types = [env.type for env in await event_store.events(f"{event_store.root}.ev.Event.>")]
    assert types == [KubeEventRecorded.type_name()] * 3


async def test_namespace_deletion_cascades_and_waits_for_finalizers(api: ApiClient) -> None:
    await api.apply([namespace("gone"), claim("a", "gone"), claim("b", "gone", finalizers=["x.io/hold"])])
    (res,) = await api.delete([("Namespace", "", "gone")])
    assert res.error is None
    ns = await api.get("Namespace", "gone")
    assert ns["status"]["phase"] == "Terminating"
    (refused,) = await api.apply([claim("c", "gone")])
    assert refused.error is not None and "because it is being terminated" in refused.error.message

    async def only_held_left() -> bool:
        items, _ = await api.list("ResourceClaim", namespace="gone")
        return [i["metadata"]["name"] for i in items] == ["b"]

    await assert_eventually(only_held_left)
    await api.finalize("ResourceClaim", "b", namespace="gone", remove=["x.io/hold"])

    async def namespace_gone() -> bool:
        with pytest.raises(StatusError):
            await api.get("Namespace", "gone")
        return True

    await assert_eventually(namespace_gone)
    (protected,) = await api.delete([("Namespace", "", "default")])
    assert protected.error is not None and protected.error.code == 403


async def test_events_go_with_their_namespace(api: ApiClient, event_store: EventStore) -> None:
    await api.apply([namespace("evns"), claim("a", "evns")])
    await api.record_event("ResourceClaim", "a", "Allocated", "gpu-0", namespace="evns")
    await api.record_event("ResourceClaim", "a", "Failed", "oops", namespace="evns", type_="Warning")
    await api.record_event("ResourceClaim", "kept", "Allocated", "elsewhere")  # default namespace
    items, _ = await api.list("Event", namespace="evns")
    assert len(items) == 2
    (res,) = await api.delete([("Namespace", "", "evns")])
    assert res.error is None

    async def namespace_gone() -> bool:
        try:
            await api.get("Namespace", "evns")
        except StatusError as exc:
            return exc.status.code == 404
        return False

    await assert_eventually(namespace_gone)
    items, _ = await api.list("Event", namespace=None)
    assert [i["metadata"]["namespace"] for i in items] == ["default"]
    with pytest.raises(StatusError, match='namespaces "evns" not found'):
        await api.record_event("ResourceClaim", "a", "Late", "after the namespace", namespace="evns")


async def test_events_left_in_a_deleted_namespace_by_an_older_log_are_deleted_at_start(
    api: ApiClient, apiserver: ApiServer, event_store: EventStore
) -> None:
    """Logs written before Events went with their namespace: the namespace was removed, its Events
    stayed. The namespace controller deletes them when an apiserver starts."""
    from draflow.events.objects import EVENT_KIND, EventSource, ObjectReference, make_kube_event

    await api.apply([namespace("old")])
    stale = make_kube_event(
        ObjectReference(kind="Pod", namespace="old", name="p", uid="u1"),
        type_="Normal",
        reason="Scheduled",
        message="on node-1",
        source=EventSource(component="default-scheduler"),
        now="2026-01-01T00:00:00Z",
        uid="e1",
    )
    subject = event_store.subject(EVENT_KIND, "old", stale.metadata.name)
    await event_store.append(subject, [KubeEventRecorded(event=stale)], expected_last_seq=None)
    ns_subject = event_store.subject("Namespace", None, "old")
    from draflow.events.objects import object_deleted

    await event_store.append(
        ns_subject, [object_deleted("Namespace")], expected_last_seq=None
    )  # as the old drain did
    second = ApiServer(await EventStore.open(event_store.settings, "apiserver-2"))
    await second.start()
    try:

        async def swept() -> bool:
            return not second.store.index.items(EVENT_KIND, "old")

        await assert_eventually(swept)
    finally:
        await second.stop()
        await second.events.close()


async def test_restart_rebuilds_the_same_state_from_the_log(
    api: ApiClient, apiserver: ApiServer, event_store: EventStore
) -> None:
    await api.apply([namespace("r"), claim("one", "r"), claim("two", "r", finalizers=["a.b/c"])])
    await api.delete([("ResourceClaim", "r", "two"), ("ResourceClaim", "r", "one")])
    before, _ = await api.list("ResourceClaim", namespace=None)
    second = ApiServer(await EventStore.open(event_store.settings, "apiserver-2"))
    await second.start()
    try:
        fresh = second.store.index.items("ResourceClaim")
        assert [msgspec.json.decode(msgspec.json.encode(o)) for o in fresh] == [
            {k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in before
        ]
        assert second.store.index.version("ResourceClaim", "r", "one") == apiserver.store.index.version(
            "ResourceClaim", "r", "one"
        )
    finally:
        await second.stop()
        await second.events.close()


async def test_watch_streams_added_modified_deleted(api: ApiClient) -> None:
    await api.apply([claim("w0", labels={"app": "x"})])
    seen: list[tuple[str, str]] = []

    async def consume() -> None:
        async for change in api.watch("ResourceClaim", namespace="default", label_selector="app=x"):
            seen.append((change.type, object_meta(change.object).name))

    task = asyncio.create_task(consume())
    try:
        await assert_eventually(lambda: seen == [("ADDED", "w0")])
        await api.apply([claim("w1", labels={"app": "x"}), claim("unlabelled")])
        await api.apply([claim("w0", labels={"app": "x"}, annotations={"a": "b"})])
        await api.delete([("ResourceClaim", "default", "w1")])
        # Relabelling moves objects out of and into the selection, as the Kubernetes watch cache shows it.
        await api.apply([claim("w0", labels={"app": "y"}, annotations={"a": "b"})])
        await api.apply([claim("unlabelled", labels={"app": "x"})])
        expected = [
            ("ADDED", "w0"),
            ("ADDED", "w1"),
            ("MODIFIED", "w0"),
            ("DELETED", "w1"),
            ("DELETED", "w0"),
            ("ADDED", "unlabelled"),
        ]
        await assert_eventually(lambda: seen == expected, message=str(seen))
    finally:
        task.cancel()
        await asyncio.wait({task}, timeout=5)


async def test_bad_requests_get_a_status_not_a_crash(api: ApiClient) -> None:
    reply = await api.nc.request(f"{api.settings.root}.api.apply", b"\xff\xfe not json", timeout=5)
    assert b'"code":400' in reply.data
    reply = await api.nc.request(f"{api.settings.root}.api.nosuchverb", b"{}", timeout=5)
    assert b'"code":404' in reply.data
    with pytest.raises(StatusError, match="doesn't have a resource type"):
        await api.get("ComputeDomain", "x")


async def test_client_waits_for_a_starting_apiserver(event_store: EventStore, settings: Settings) -> None:
    impatient = await ApiClient.connect(settings, wait_for_server_s=0.2)
    patient = await ApiClient.connect(settings, wait_for_server_s=20)
    server = ApiServer(await EventStore.open(settings, "late-apiserver"))
    try:
        with pytest.raises(StatusError) as err:
            await impatient.get("Namespace", "default")
        assert err.value.status.code == 503 and err.value.status.reason == "ServiceUnavailable"
        pending = asyncio.create_task(patient.get("Namespace", "default"))  # asked before anyone serves
        await server.start()
        assert (await pending)["metadata"]["name"] == "default"
    finally:
        await server.stop()
        await server.events.close()
        await impatient.close()
        await patient.close()
