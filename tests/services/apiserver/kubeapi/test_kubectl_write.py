"""kubectl writes through the Kubernetes API: apply (client- and server-side), patch, replace,
delete, the status subresource; every write goes through the apiserver's own admission."""

from __future__ import annotations

import json

import pytest

from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import StatusError
from tests.e2e.demo import EXAMPLES, EXAMPLES_DIR
from tests.paths import ROOT
from tests.services.apiserver.kubeapi.conftest import Kube, http, kubectl

KEP5004 = ROOT / "examples" / "extended-resources"


def _files(*names: str) -> list[str]:
    return [arg for name in names for arg in ("-f", str(EXAMPLES_DIR / name))]


async def test_apply_the_demo_client_side_then_again(kube: Kube, api: ApiClient) -> None:
    first = await kubectl(kube, "apply", *_files("deviceclass.yaml", *EXAMPLES))
    lines = first.out.splitlines()
    assert "deviceclass.resource.k8s.io/gpu.example.com created" in lines
    assert "resourceclaimtemplate.resource.k8s.io/single-gpu created" in lines
    assert all(line.endswith(" created") for line in lines), first.out
    created_pods = sum(1 for line in lines if line.startswith("pod/"))
    pods, _ = await api.list("Pod")
    assert created_pods >= 7 and len(pods) == created_pods
    # what kubectl stored is what draflow's own client reads: one store
    annotations = pods[0]["metadata"]["annotations"]
    assert "kubectl.kubernetes.io/last-applied-configuration" in annotations
    again = await kubectl(kube, "apply", *_files("deviceclass.yaml", *EXAMPLES))
    assert not any(line.endswith(" created") for line in again.out.splitlines()), again.out
    assert len((await api.list("Pod"))[0]) == created_pods


async def test_kep5004_manifests_server_side(kube: Kube, api: ApiClient) -> None:
    files = ["-f", str(KEP5004 / "deviceclass.yaml"), "-f", str(KEP5004 / "quota.yaml")]
    out = (await kubectl(kube, "apply", "--server-side", *files)).out.splitlines()
    assert out == [
        "deviceclass.resource.k8s.io/gpu.example.com serverside-applied",
        "resourcequota/gpu serverside-applied",
    ]
    cls = await api.get("DeviceClass", "gpu.example.com")
    assert cls["spec"]["extendedResourceName"] == "example.com/gpu"  # v1beta1 manifest, stored as v1
    (entry,) = cls["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"]) == ("kubectl", "Apply")
    assert "f:extendedResourceName" in entry["fieldsV1"]["f:spec"]
    # read back in the version it was written in
    old = (
        await kubectl(kube, "get", "deviceclasses.v1beta1.resource.k8s.io", "gpu.example.com", "-o", "json")
    ).json()
    assert old["apiVersion"] == "resource.k8s.io/v1beta1"
    await kubectl(kube, "apply", "--server-side", "-f", str(KEP5004 / "deployment.yaml"))
    assert (await api.get("Deployment", "demo"))["spec"]["replicas"] == 1


async def test_server_side_apply_conflicts_and_force(kube: Kube, api: ApiClient) -> None:
    manifest = (KEP5004 / "deployment.yaml").read_text()
    await kubectl(kube, "apply", "--server-side", "-f", "-", stdin=manifest)
    five = manifest.replace("replicas: 1", "replicas: 5")
    refused = await kubectl(
        kube, "apply", "--server-side", "--field-manager=other", "-f", "-", stdin=five, check=False
    )
    assert refused.rc == 1
    assert (
        'Apply failed with 1 conflict: conflict with "kubectl" using apps/v1: .spec.replicas' in refused.err
    )
    assert (await api.get("Deployment", "demo"))["spec"]["replicas"] == 1
    await kubectl(
        kube, "apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", "-", stdin=five
    )
    dep = await api.get("Deployment", "demo")
    assert dep["spec"]["replicas"] == 5
    owners = {e["manager"]: e["fieldsV1"] for e in dep["metadata"]["managedFields"]}
    assert "f:replicas" in owners["other"]["f:spec"] and "f:replicas" not in owners["kubectl"]["f:spec"]
    # a field the manager stops applying (and nobody else owns) goes; an equal value is shared
    labelled = five.replace("metadata:\n  name: demo", "metadata:\n  name: demo\n  labels:\n    team: ml", 1)
    await kubectl(kube, "apply", "--server-side", "-f", "-", stdin=labelled)
    assert (await api.get("Deployment", "demo"))["metadata"]["labels"] == {"team": "ml"}
    await kubectl(kube, "apply", "--server-side", "-f", "-", stdin=five)
    assert "labels" not in (await api.get("Deployment", "demo"))["metadata"]


async def test_patch_kinds(kube: Kube, api: ApiClient) -> None:
    await kubectl(
        kube,
        "apply",
        *_files("deviceclass.yaml", "basic-resourceclaimtemplate--basic-resourceclaimtemplate.yaml"),
    )
    ns = ["-n", "basic-resourceclaimtemplate"]
    await kubectl(kube, "label", "pod", "pod0", "tier=gpu", *ns)
    await kubectl(kube, "annotate", "pod", "pod0", "note=hello", *ns)
    # strategic merge: the container is merged by name (the image is the one mutable field), the
    # rest of it stays; a change of anything else in a pod's spec is refused as upstream
    patch = json.dumps({"spec": {"containers": [{"name": "ctr0", "image": "ubuntu:24.04"}]}})
    await kubectl(kube, "patch", "pod", "pod0", *ns, "-p", patch)
    refused = await kubectl(
        kube, "patch", "pod", "pod0", *ns, "-p", '{"spec":{"restartPolicy":"Never"}}', check=False
    )
    assert (
        refused.rc == 1 and "is invalid" in refused.err and "pod updates may not change fields" in refused.err
    )
    await kubectl(
        kube,
        "patch",
        "deviceclass",
        "gpu.example.com",
        "--type=merge",
        "-p",
        '{"metadata":{"labels":{"x":"1"}}}',
    )
    await kubectl(
        kube,
        "patch",
        "deviceclass",
        "gpu.example.com",
        "--type=json",
        "-p",
        '[{"op":"add","path":"/metadata/labels/y","value":"2"},{"op":"remove","path":"/metadata/labels/x"}]',
    )
    pod = await api.get("Pod", "pod0", namespace="basic-resourceclaimtemplate")
    assert pod["metadata"]["labels"] == {"app": "pod", "tier": "gpu"}
    assert pod["metadata"]["annotations"]["note"] == "hello"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "ubuntu:24.04" and container["command"] == ["bash", "-c"]
    assert (await api.get("DeviceClass", "gpu.example.com"))["metadata"]["labels"] == {"y": "2"}


async def test_update_conflicts_on_a_stale_resource_version(kube: Kube, api: ApiClient) -> None:
    await kubectl(kube, "apply", *_files("deviceclass.yaml"))
    path = "/apis/resource.k8s.io/v1/deviceclasses/gpu.example.com"
    code, body = await http(kube, "GET", path)
    obj = json.loads(body)
    stale = dict(obj, metadata=dict(obj["metadata"], labels={"a": "b"}))
    code, body = await http(kube, "PUT", path, body=json.dumps(stale).encode())
    assert code == 200 and json.loads(body)["metadata"]["labels"] == {"a": "b"}
    code, body = await http(kube, "PUT", path, body=json.dumps(stale).encode())  # same, now stale
    status = json.loads(body)
    assert code == 409 and status["kind"] == "Status" and status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on deviceclasses.resource.k8s.io "gpu.example.com": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )
    assert status["details"] == {
        "name": "gpu.example.com",
        "group": "resource.k8s.io",
        "kind": "deviceclasses",
    }


async def test_errors_are_the_apiservers(kube: Kube, api: ApiClient) -> None:
    """One code path: the HTTP API refuses exactly as the NATS API does, nothing stored."""
    bad = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "bad", "namespace": "default"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "c", "count": -1}}]}
        },
    }
    code, body = await http(
        kube,
        "POST",
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
        body=json.dumps(bad).encode(),
    )
    status = json.loads(body)
    (via_nats,) = await api.apply([bad])
    assert via_nats.error is not None
    assert (code, status["reason"], status["message"]) == (422, "Invalid", via_nats.error.message)
    assert (
        status["details"]["causes"]
        == [
            {"reason": "FieldValueInvalid", "message": c.message, "field": c.field}
            for c in via_nats.error.causes
        ]
        or status["details"]["causes"][0]["field"] == "spec.devices.requests[0].exactly.count"
    )
    with pytest.raises(StatusError):
        await api.get("ResourceClaim", "bad")
    out = await kubectl(kube, "create", "-f", "-", stdin=json.dumps(bad), check=False)
    assert out.rc == 1 and out.err.startswith('The ResourceClaim "bad" is invalid: ')
    team = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    await kubectl(kube, "create", "-f", "-", stdin=team)
    exists = await kubectl(kube, "create", "-f", "-", stdin=team, check=False)
    assert exists.err.strip() == (
        'Error from server (AlreadyExists): error when creating "STDIN": namespaces "team" already exists'
    )


async def test_dry_run_server_stores_nothing(kube: Kube, api: ApiClient) -> None:
    dry = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dry"}})
    out = await kubectl(kube, "create", "-f", "-", "--dry-run=server", "-o", "json", stdin=dry)
    assert out.json()["metadata"]["name"] == "dry"
    with pytest.raises(StatusError):
        await api.get("Namespace", "dry")


async def test_delete_and_finalizers(kube: Kube, api: ApiClient) -> None:
    await kubectl(kube, "apply", *_files("deviceclass.yaml"))
    out = await kubectl(kube, "delete", "deviceclass", "gpu.example.com")
    assert out.out.strip() == 'deviceclass.resource.k8s.io "gpu.example.com" deleted'
    with pytest.raises(StatusError):
        await api.get("DeviceClass", "gpu.example.com")
    held = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "held"},
    }
    await kubectl(kube, "create", "-f", "-", stdin=json.dumps(held))
    await kubectl(kube, "apply", *_files("deviceclass.yaml"))
    await kubectl(
        kube,
        "patch",
        "deviceclass",
        "gpu.example.com",
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":["example.com/keep"]}}',
    )
    await kubectl(kube, "delete", "deviceclass", "gpu.example.com", "--wait=false")
    kept = await api.get("DeviceClass", "gpu.example.com")
    assert kept["metadata"]["deletionTimestamp"] and kept["metadata"]["finalizers"] == ["example.com/keep"]
    await kubectl(
        kube,
        "patch",
        "deviceclass",
        "gpu.example.com",
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
    )
    with pytest.raises(StatusError):
        await api.get("DeviceClass", "gpu.example.com")
    missing = await kubectl(kube, "delete", "deviceclass", "gpu.example.com", check=False)
    assert (
        missing.err.strip()
        == 'Error from server (NotFound): deviceclasses.resource.k8s.io "gpu.example.com" not found'
    )


async def test_status_subresource(kube: Kube, api: ApiClient) -> None:
    await kubectl(kube, "apply", *_files("basic-resourceclaimtemplate--basic-resourceclaimtemplate.yaml"))
    path = "/api/v1/namespaces/basic-resourceclaimtemplate/pods/pod0/status"
    code, body = await http(kube, "GET", path)
    pod = json.loads(body)
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    pod["metadata"]["labels"] = {"ignored": "yes"}  # the status subresource writes status only
    code, body = await http(kube, "PUT", path, body=json.dumps(pod).encode())
    assert code == 200, body
    stored = await api.get("Pod", "pod0", namespace="basic-resourceclaimtemplate")
    assert stored["status"]["phase"] == "Running" and stored["metadata"]["labels"] == {"app": "pod"}
    code, body = await http(kube, "PUT", path, body=json.dumps(pod).encode())  # stale resourceVersion
    assert code == 409
    patch = {"status": {"phase": "Succeeded"}}
    code, body = await http(
        kube, "PATCH", path, body=json.dumps(patch).encode(), content_type="application/merge-patch+json"
    )
    assert code == 200 and json.loads(body)["status"]["phase"] == "Succeeded"


INLINE_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {
        "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "my"}]}}],
        "resourceClaims": [{"name": "my", "resourceClaimTemplateName": "missing"}],
    },
}


async def test_pod_claim_statuses_through_the_status_subresource(kube: Kube, api: ApiClient) -> None:
    """Issue 23 item 6, upstream's "runs a pod without a generated resource claim": client-go's
    UpdateStatus (a PUT of the whole pod to ``pods/<name>/status``) and kubectl's status patches
    may set ``resourceClaimStatuses`` entries, with ``resourceClaimName`` null ("no claim
    needed") or a claim's name; what the apiserver refuses is refused with upstream's words."""
    path = "/api/v1/namespaces/default/pods/p/status"
    code, body = await http(
        kube, "POST", "/api/v1/namespaces/default/pods", body=json.dumps(INLINE_POD).encode()
    )
    assert code == 201, body
    pod = json.loads(body)
    pod["status"]["resourceClaimStatuses"] = [{"name": "my", "resourceClaimName": None}]
    code, body = await http(kube, "PUT", path, body=json.dumps(pod).encode())
    assert code == 200, body
    assert (await api.get("Pod", "p"))["status"]["resourceClaimStatuses"] == [{"name": "my"}]

    patch = json.dumps(
        {"status": {"resourceClaimStatuses": [{"name": "my", "resourceClaimName": "p-my-abcde"}]}}
    )
    await kubectl(kube, "patch", "pod", "p", "--subresource=status", "-p", patch)
    stored = (await api.get("Pod", "p"))["status"]["resourceClaimStatuses"]
    assert stored == [{"name": "my", "resourceClaimName": "p-my-abcde"}]

    for statuses, message in [
        (
            [{"name": "other"}],
            'status.resourceClaimStatuses[0].name: Invalid value: "other": '
            "must match the name of an entry in `spec.resourceClaims`",
        ),
        ([{"name": "my"}, {"name": "my"}], 'status.resourceClaimStatuses[1].name: Duplicate value: "my"'),
        (
            [{"name": "my", "resourceClaimName": "Not_A_Name"}],
            'status.resourceClaimStatuses[0].name: Invalid value: "Not_A_Name": '
            "a lowercase RFC 1123 subdomain",
        ),
    ]:
        patch = json.dumps({"status": {"resourceClaimStatuses": statuses}})
        refused = await kubectl(
            kube, "patch", "pod", "p", "--subresource=status", "--type=merge", "-p", patch, check=False
        )
        assert refused.rc == 1 and message in refused.err, refused.err
        assert refused.err.startswith('The Pod "p" is invalid: '), refused.err


async def test_kubectl_scale(kube: Kube, api: ApiClient) -> None:
    await kubectl(kube, "apply", "-f", str(KEP5004 / "deployment.yaml"))
    out = await kubectl(kube, "scale", "deployment", "demo", "--replicas=3")
    assert out.out.strip() == "deployment.apps/demo scaled"
    assert (await api.get("Deployment", "demo"))["spec"]["replicas"] == 3
    stale = await kubectl(
        kube, "scale", "deployment", "demo", "--replicas=4", "--current-replicas=1", check=False
    )
    assert stale.rc == 1 and "Expected replicas to be 1, was 3" in stale.err
    code, body = await http(kube, "GET", "/apis/apps/v1/namespaces/default/deployments/demo/scale")
    scale = json.loads(body)
    assert (scale["kind"], scale["spec"]["replicas"], scale["status"]["selector"]) == ("Scale", 3, "app=demo")
    scale["spec"]["replicas"] = -1
    code, body = await http(
        kube,
        "PUT",
        "/apis/apps/v1/namespaces/default/deployments/demo/scale",
        body=json.dumps(scale).encode(),
    )
    assert code == 422
    resources = (await kubectl(kube, "api-resources", "--api-group=apps", "-o", "name")).out.split()
    assert resources == ["deployments.apps"]
