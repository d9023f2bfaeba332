"""CRDs and custom objects through the Kubernetes API with the real kubectl: discovery, apply of a
CRD and an object, get with printer columns, patch (merge and JSON), the status subresource,
watch, refusals in the apiserver's words, delete."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from draflow.events.api.registry import custom_crds, unregister_custom
from draflow.services.runtime.client import ApiClient
from tests.builders.crds import FROB_GROUP, frobnicator_crd, make_crd, make_frob
from tests.services.apiserver.kubeapi.conftest import Kube, http, kubectl

pytestmark = pytest.mark.kep4381


@pytest.fixture(autouse=True)
def _forget_custom_kinds() -> Iterator[None]:
    before = set(custom_crds())
    yield
    for name in set(custom_crds()) - before:
        unregister_custom(name)


async def test_kubectl_apply_get_patch_delete_custom_objects(kube: Kube, api: ApiClient) -> None:
    docs = yaml.safe_dump_all([frobnicator_crd(), make_frob("three", 3)])
    crd_only = await kubectl(kube, "apply", "-f", "-", stdin=yaml.safe_dump(frobnicator_crd()))
    assert (
        crd_only.out.strip()
        == f"customresourcedefinition.apiextensions.k8s.io/claimparameters.{FROB_GROUP} created"
    )
    applied = await kubectl(kube, "apply", "-f", "-", stdin=docs)
    assert f"claimparameters.{FROB_GROUP}/three created" in applied.out.splitlines()

    resources = await kubectl(kube, "api-resources", "--api-group", FROB_GROUP, "--no-headers")
    assert resources.out.split() == ["claimparameters", f"{FROB_GROUP}/v1", "true", "ClaimParameters"]
    table = await kubectl(kube, "get", "claimparameters")
    assert table.out.splitlines() == ["NAME    FROBNICATORS", "three   3"]
    got = json.loads((await kubectl(kube, "get", "claimparameters", "three", "-o", "json")).out)
    assert got["spec"] == {"numberOfFrobnicators": 3} and got["apiVersion"] == f"{FROB_GROUP}/v1"

    await kubectl(
        kube, "patch", "claimparameters", "three", "--type=merge", "-p", '{"spec":{"env":{"A":"b"}}}'
    )
    await kubectl(
        kube, "patch", "claimparameters", "three", "--type=json",
        "-p", '[{"op":"replace","path":"/spec/numberOfFrobnicators","value":5}]',
    )  # fmt: skip
    assert (await api.get("claimparameters", "three"))["spec"] == {
        "numberOfFrobnicators": 5,
        "env": {"A": "b"},
    }
    ssa = await kubectl(kube, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(make_frob("ssa", 2)))
    assert ssa.out.strip() == f"claimparameters.{FROB_GROUP}/ssa serverside-applied"
    again = await kubectl(
        kube, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(make_frob("ssa", 6))
    )
    assert again.rc == 0 and (await api.get("claimparameters", "ssa"))["spec"] == {"numberOfFrobnicators": 6}
    strategic = await kubectl(kube, "patch", "claimparameters", "three", "-p", '{"spec":{}}', check=False)
    assert strategic.rc != 0 and "unknown format" in strategic.err, strategic.err

    refused = await kubectl(
        kube, "apply", "-f", "-", stdin=yaml.safe_dump(make_frob("many", 17)), check=False
    )
    assert refused.rc == 1
    assert refused.err == (  # kubectl's words for the apiserver's refusal, as upstream's
        'The ClaimParameters "many" is invalid: spec.numberOfFrobnicators: Invalid value: 17: '
        "spec.numberOfFrobnicators in body should be less than or equal to 16\n"
    )

    deleted = await kubectl(kube, "delete", "crd", f"claimparameters.{FROB_GROUP}")
    assert "deleted" in deleted.out
    gone = await kubectl(kube, "get", "claimparameters", check=False)
    assert gone.rc != 0
    # kubectl's discovery cache may still map the name: then the API itself says it is gone
    assert "could not find the requested resource" in gone.err or "doesn't have a resource type" in gone.err


async def call(kube: Kube, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    status, data = await http(kube, method, path, body=None if body is None else json.dumps(body).encode())
    return status, json.loads(data) if data.strip().startswith(b"{") else data


async def test_rest_paths_versions_status_and_watch(kube: Kube, api: ApiClient) -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
            "status": {
                "type": "object",
                "properties": {"phase": {"type": "string", "enum": ["Ready", "Pending"]}},
            },
        },
    }
    crd = make_crd("Volume", "store.example.com", schema, versions=("v1", "v1beta1"), status_subresource=True)
    (made,) = await api.apply([crd])
    assert made.error is None, made.error
    code, group = await call(kube, "GET", "/apis/store.example.com")
    assert code == 200 and [v["version"] for v in group["versions"]] == ["v1", "v1beta1"]
    base = "/apis/store.example.com/v1beta1/namespaces/default/volumes"
    body = {
        "apiVersion": "store.example.com/v1beta1",
        "kind": "Volume",
        "metadata": {"name": "a"},
        "spec": {"size": 1},
    }
    code, created = await call(kube, "POST", base, body)
    assert code == 201 and created["apiVersion"] == "store.example.com/v1beta1", created
    stored = await api.get("volumes", "a")
    assert stored["apiVersion"] == "store.example.com/v1"  # the storage version
    code, put = await call(
        kube, "PUT", f"{base}/a", {**created, "spec": {"size": 2}, "status": {"phase": "Ready"}}
    )
    assert code == 200 and put["spec"] == {"size": 2} and "status" not in put, put
    code, status = await call(kube, "PUT", f"{base}/a/status", {**put, "status": {"phase": "Ready"}})
    assert code == 200 and status["status"] == {"phase": "Ready"}, status
    code, bad = await call(kube, "PUT", f"{base}/a/status", {**status, "status": {"phase": "Gone"}})
    assert code == 422 and 'status.phase: Unsupported value: "Gone"' in bad["message"], bad
    code, listed = await call(kube, "GET", "/apis/store.example.com/v1/volumes")
    assert code == 200 and [i["metadata"]["name"] for i in listed["items"]] == ["a"]
    code, events = await http(kube, "GET", f"{base}?watch=true&timeoutSeconds=1")
    assert code == 200
    first = json.loads(events.splitlines()[0])
    assert first["type"] == "ADDED" and first["object"]["status"] == {"phase": "Ready"}
    code, _ = await call(kube, "DELETE", f"{base}/a")
    assert code == 200
    code, _ = await call(kube, "GET", f"{base}/a")
    assert code == 404
