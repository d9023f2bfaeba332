"""The Kubernetes API over raw HTTPS: routing, refusals, paging, deletecollection, older versions,
dry runs, server-side apply's edges, OpenAPI documents, Table options, Table and selected watches."""

from __future__ import annotations

import json
from typing import Any

from services.runtime.client import ApiClient
from tests.kubeapi.conftest import Kube, http

RC = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def claim(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
        },
    }


async def _json(kube: Kube, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
    code, raw = await http(kube, method, path, body=data, **kw)
    return code, json.loads(raw) if raw.strip().startswith((b"{", b"[")) else raw


async def test_routing_and_refusals(kube: Kube) -> None:
    for method, path, code in (
        ("GET", "/nope", 404),
        ("GET", "/api/v1/widgets", 404),
        ("GET", "/apis/resource.k8s.io/v1/resourceclaims/x", 404),  # namespaced, no namespace
        ("GET", f"{RC}/x/scale", 404),
        ("POST", f"{RC}/x", 405),
        ("GET", "/apis/nope.io", 404),
        ("GET", "/apis/nope.io/v1", 404),
        ("GET", "/openapi/v3/apis/nope.io/v1", 404),
        ("GET", "/openapi/v9", 404),
    ):
        got, body = await _json(kube, method, path)
        assert got == code, (method, path, body)
        assert body["kind"] == "Status" and body["code"] == code
    code, body = await _json(kube, "POST", RC, b"\x00k8s", content_type="application/vnd.kubernetes.protobuf")
    assert (code, body["reason"]) == (415, "UnsupportedMediaType")
    code, body = await _json(kube, "POST", RC, b"{not json")
    assert (code, body["reason"]) == (400, "BadRequest")
    code, body = await _json(kube, "POST", RC, dict(claim("a"), kind="DeviceClass"))
    assert code == 400 and "does not match" in body["message"]
    wrong_ns = claim("a")
    wrong_ns["metadata"]["namespace"] = "other"
    code, body = await _json(kube, "POST", RC, wrong_ns)
    assert code == 400 and "namespace" in body["message"]
    code, _ = await _json(kube, "POST", RC, claim("a"))
    assert code == 201
    code, body = await _json(kube, "PUT", f"{RC}/b", claim("a"))
    assert code == 400 and "name of the object does not match" in body["message"]
    code, body = await _json(kube, "PUT", f"{RC}/zz", claim("zz"))
    assert code == 404
    code, body = await _json(kube, "GET", "/apis/resource.k8s.io")
    assert body["preferredVersion"]["version"] == "v1"


async def test_paging_deletecollection_and_delete_options(kube: Kube, api: ApiClient) -> None:
    await api.apply([claim(f"c{i}", team="a" if i % 2 else "b") for i in range(5)])
    code, page = await _json(kube, "GET", f"{RC}?limit=2")
    assert [i["metadata"]["name"] for i in page["items"]] == ["c0", "c1"] and page["metadata"]["continue"]
    code, rest = await _json(kube, "GET", f"{RC}?limit=10&continue={page['metadata']['continue']}")
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c2", "c3", "c4"] and "continue" not in rest[
        "metadata"
    ]
    code, gone = await _json(kube, "DELETE", f"{RC}?labelSelector=team%3Da")
    assert code == 200 and [i["metadata"]["name"] for i in gone["items"]] == ["c1", "c3"]
    items, _ = await api.list("ResourceClaim", namespace="default")
    assert [i["metadata"]["name"] for i in items] == ["c0", "c2", "c4"]
    code, dry = await _json(kube, "DELETE", f"{RC}/c0?dryRun=All")
    assert code == 200 and dry["metadata"]["name"] == "c0"
    code, body = await _json(kube, "DELETE", f"{RC}/c0", {"preconditions": {"uid": "not-it"}})
    assert code == 409 and "Precondition failed" in body["message"]
    await api.finalize("ResourceClaim", "c2", namespace="default", add=["example.com/hold"])
    code, held = await _json(
        kube, "DELETE", f"{RC}/c2", {"propagationPolicy": "Foreground", "gracePeriodSeconds": 0}
    )
    assert code == 200 and held["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in held["metadata"]["finalizers"]
    code, body = await _json(kube, "DELETE", f"{RC}/c4?propagationPolicy=Sideways")
    assert code == 422
    code, status = await _json(kube, "DELETE", f"{RC}/c4", {"orphanDependents": False})
    assert (code, status["status"], status["details"]["name"]) == (200, "Success", "c4")


async def test_older_versions_read_back_in_their_shape(kube: Kube, api: ApiClient) -> None:
    await api.apply([claim("gpu")])
    code, old = await _json(
        kube, "GET", "/apis/resource.k8s.io/v1beta1/namespaces/default/resourceclaims/gpu"
    )
    assert old["apiVersion"] == "resource.k8s.io/v1beta1"
    (req,) = old["spec"]["devices"]["requests"]
    assert (
        req["deviceClassName"] == "gpu.example.com"
        and req["allocationMode"] == "ExactCount"
        and "exactly" not in req
    )
    slice_ = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n",
            "pool": {"name": "n", "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"model": {"string": "a"}}}],
        },
    }
    await api.apply([slice_])
    for version in ("v1beta1", "v1alpha3"):
        code, got = await _json(kube, "GET", f"/apis/resource.k8s.io/{version}/resourceslices/s")
        assert got["spec"]["devices"] == [
            {"name": "gpu-0", "basic": {"attributes": {"model": {"string": "a"}}}}
        ]
    template = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.example.com"}]}}},
    }
    code, created = await _json(
        kube, "POST", "/apis/resource.k8s.io/v1beta1/namespaces/default/resourceclaimtemplates", template
    )
    assert (
        code == 201
        and created["spec"]["spec"]["devices"]["requests"][0]["deviceClassName"] == "gpu.example.com"
    )
    code, stored = await _json(
        kube, "GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates/t"
    )
    assert stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.example.com"


async def test_dry_runs_and_server_side_apply_edges(kube: Kube, api: ApiClient) -> None:
    code, dry = await _json(kube, "POST", f"{RC}?dryRun=All", claim("d"))
    assert code == 201 and dry["metadata"]["name"] == "d"
    code, _ = await _json(kube, "GET", f"{RC}/d")
    assert code == 404
    apply = {**claim("d"), "metadata": {"name": "d", "labels": {"x": "1"}}}
    ctype = "application/apply-patch+yaml"
    code, body = await _json(kube, "PATCH", f"{RC}/d", apply, content_type=ctype)
    assert code == 422 and "fieldManager: Required value" in body["message"]
    code, body = await _json(
        kube, "PATCH", f"{RC}/d?fieldManager=me", dict(apply, kind="Pod"), content_type=ctype
    )
    assert code == 400
    code, created = await _json(kube, "PATCH", f"{RC}/d?fieldManager=me", apply, content_type=ctype)
    assert code == 201 and created["metadata"]["managedFields"][0]["manager"] == "me"
    code, same = await _json(kube, "PATCH", f"{RC}/d?fieldManager=me", apply, content_type=ctype)
    assert code == 200 and same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    code, body = await _json(
        kube,
        "PATCH",
        f"{RC}/d?dryRun=All",
        {"metadata": {"labels": {"y": "2"}}},
        content_type="application/merge-patch+json",
    )
    assert code == 200 and body["metadata"]["labels"] == {"x": "1", "y": "2"}
    assert (await api.get("ResourceClaim", "d", namespace="default"))["metadata"]["labels"] == {"x": "1"}
    # a patch that names a stale resourceVersion is the client's conflict, not retried
    stale = {"metadata": {"resourceVersion": "1", "labels": {"z": "3"}}}
    code, body = await _json(kube, "PATCH", f"{RC}/d", stale, content_type="application/merge-patch+json")
    assert code == 409
    # the status subresource through a strategic merge patch: conditions merge by type
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    await api.apply([pod])
    path = "/api/v1/namespaces/default/pods/p/status"
    smp = "application/strategic-merge-patch+json"
    first = {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    code, body = await _json(kube, "PATCH", path, first, content_type=smp)
    assert code == 200, body["message"]
    second = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    code, body = await _json(kube, "PATCH", path, second, content_type=smp)
    assert [c["type"] for c in body["status"]["conditions"]] == ["PodScheduled", "Ready"]


async def test_openapi_documents(kube: Kube) -> None:
    code, root = await _json(kube, "GET", "/openapi/v3")
    url = root["paths"]["apis/resource.k8s.io/v1beta1"]["serverRelativeURL"]
    code, doc = await _json(kube, "GET", url)
    assert code == 200
    schema = doc["components"]["schemas"]["ResourceSliceV1beta1"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "resource.k8s.io", "version": "v1beta1", "kind": "ResourceSlice"}
    ]
    patch = doc["paths"]["/apis/resource.k8s.io/v1beta1/resourceslices/{name}"]["patch"]
    assert {p["name"] for p in patch["parameters"]} >= {"fieldValidation", "dryRun"}
    _, v2 = await _json(kube, "GET", "/openapi/v2")
    assert v2["swagger"] == "2.0" and "Pod" in v2["definitions"]


async def test_table_options_and_table_watch(kube: Kube, api: ApiClient) -> None:
    await api.apply([claim("t1", x="1"), claim("t2")])
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    code, table = await _json(kube, "GET", f"{RC}?includeObject=Object", accept=accept)
    assert table["rows"][0]["object"]["kind"] == "ResourceClaim"
    code, table = await _json(kube, "GET", f"{RC}?includeObject=None&labelSelector=x", accept=accept)
    assert [r["cells"][0] for r in table["rows"]] == ["t1"] and "object" not in table["rows"][0]
    code, raw = await http(
        kube, "GET", f"{RC}?watch=1&timeoutSeconds=1&fieldSelector=metadata.name%3Dt2", accept=accept
    )
    (event,) = [json.loads(line) for line in raw.splitlines()]
    assert event["type"] == "ADDED" and event["object"]["kind"] == "Table"
    assert event["object"]["rows"][0]["cells"][0] == "t2" and event["object"]["columnDefinitions"]
    code, raw = await http(
        kube, "GET", f"{RC}?watch=1&timeoutSeconds=1&fieldSelector=spec.devices.requests%3Dx"
    )
    assert code == 200 and raw == b""
    code, raw = await http(kube, "GET", f"{RC}?watch=1&resourceVersion=abc")
    assert code == 400
    code, raw = await http(kube, "GET", f"{RC}?labelSelector=a%20in%20(")
    assert code == 400
