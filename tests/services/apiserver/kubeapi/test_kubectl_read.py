"""kubectl against the Kubernetes API: discovery, authentication, get in every output, describe."""

from __future__ import annotations

import json
import re

from draflow.services.runtime import printers
from draflow.services.runtime.client import ApiClient
from tests.paths import ROOT
from tests.services.apiserver.kubeapi.conftest import Kube, http, kubectl

EXAMPLES = ROOT / "examples" / "dra-example-driver"
TEMPLATE = EXAMPLES / "basic-resourceclaimtemplate--basic-resourceclaimtemplate.yaml"
NS = "basic-resourceclaimtemplate"


async def test_api_resources_and_version(kube: Kube) -> None:
    out = (await kubectl(kube, "api-resources", "--no-headers")).out
    rows = {tuple(line.split()) for line in out.splitlines()}
    assert ("pods", "po", "v1", "true", "Pod") in rows
    assert ("namespaces", "ns", "v1", "false", "Namespace") in rows
    assert ("resourceclaims", "resource.k8s.io/v1", "true", "ResourceClaim") in rows
    assert ("deviceclasses", "resource.k8s.io/v1", "false", "DeviceClass") in rows
    assert ("resourceclaims", "cdi.k8s.io/v1alpha1", "true", "ResourceClaim") in rows
    version = (await kubectl(kube, "version", "-o", "json")).json()
    assert version["serverVersion"]["gitVersion"].startswith("v1.37")


async def test_tls_and_tokens(kube: Kube) -> None:
    code, body = await http(kube, "GET", "/api/v1/namespaces", token=None)
    assert code == 401 and json.loads(body)["reason"] == "Unauthorized"
    code, body = await http(kube, "GET", "/api/v1/namespaces", token="not-a-token")
    assert code == 401
    code, _ = await http(kube, "GET", "/api/v1/namespaces")
    assert code == 200
    assert (await http(kube, "GET", "/version", token=None))[0] == 200  # public, as upstream
    # a second start reuses the CA and the token: kubeconfigs handed out stay valid
    from draflow.services.apiserver.kubeapi.auth import load_or_create

    again = load_or_create(kube.credentials.directory, "127.0.0.1")
    assert again.ca_pem == kube.credentials.ca_pem and again.tokens == kube.credentials.tokens


async def test_get_outputs(kube: Kube) -> None:
    await kubectl(kube, "apply", "-f", str(EXAMPLES / "deviceclass.yaml"), "-f", str(TEMPLATE))
    wide = (await kubectl(kube, "get", "pods", "-A", "-o", "wide")).out.splitlines()
    assert wide[0].split() == [
        "NAMESPACE",
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED",
        "NODE",
        "READINESS",
        "GATES",
    ]
    assert [line.split()[:4] for line in wide[1:]] == [
        [NS, "pod0", "0/1", "Pending"],
        [NS, "pod1", "0/1", "Pending"],
    ]
    names = (await kubectl(kube, "get", "pods,resourceclaimtemplates", "-A", "-o", "name")).out.split()
    assert names == ["pod/pod0", "pod/pod1", "resourceclaimtemplate.resource.k8s.io/single-gpu"]
    as_json = (await kubectl(kube, "get", "pods", "-n", NS, "-o", "json")).json()
    assert as_json["kind"] == "List" and [p["metadata"]["name"] for p in as_json["items"]] == ["pod0", "pod1"]
    pod = as_json["items"][0]
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod" and pod["metadata"]["uid"]
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "single-gpu"
    as_yaml = (await kubectl(kube, "get", "pod", "pod0", "-n", NS, "-o", "yaml")).out
    assert "kind: Pod" in as_yaml and "name: pod0" in as_yaml
    path = (await kubectl(kube, "get", "pods", "-n", NS, "-o", "jsonpath={.items[*].metadata.name}")).out
    assert path == "pod0 pod1"
    selected = (await kubectl(kube, "get", "pods", "-n", NS, "-l", "app=pod", "-o", "name")).out.split()
    assert selected == ["pod/pod0", "pod/pod1"]
    by_field = await kubectl(
        kube, "get", "pods", "-n", NS, "--field-selector", "metadata.name=pod1", "-o", "name"
    )
    assert by_field.out.split() == ["pod/pod1"]
    paged = (await kubectl(kube, "get", "pods", "-n", NS, "--chunk-size=1", "-o", "name")).out.split()
    assert paged == ["pod/pod0", "pod/pod1"]
    missing = await kubectl(kube, "get", "pod", "nope", "-n", NS, check=False)
    assert missing.rc == 1 and missing.err.strip() == 'Error from server (NotFound): pods "nope" not found'
    none = await kubectl(kube, "get", "resourceclaims", "-n", "default", check=False)
    assert none.rc == 0 and none.err.strip() == "No resources found in default namespace."


async def test_table_columns_are_draflow_gets(kube: Kube) -> None:
    """The server's Table has exactly the columns ``draflow get`` prints (wide ones at priority 1)."""
    await kubectl(kube, "apply", "-f", str(TEMPLATE))
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    code, body = await http(kube, "GET", f"/api/v1/namespaces/{NS}/pods", accept=accept)
    assert code == 200
    table = json.loads(body)
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == printers.headers("Pod", True)
    assert [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0] == printers.headers(
        "Pod", False
    )
    assert table["rows"][0]["cells"][:3] == ["pod0", "0/1", "Pending"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert table["rows"][0]["object"]["metadata"]["namespace"] == NS


async def test_describe_with_events(kube: Kube, api: ApiClient) -> None:
    await kubectl(kube, "apply", "-f", str(TEMPLATE))
    await api.record_event(
        "Pod",
        "pod0",
        "FailedScheduling",
        "0/0 nodes are available",
        namespace=NS,
        type_="Warning",
        component="default-scheduler",
    )
    out = (await kubectl(kube, "describe", "pod", "pod0", "-n", NS)).out
    assert "Name:         pod0" in out and "Status:       Pending" in out
    events = out.split("Events:", 1)[1]
    assert "Warning  FailedScheduling" in events and "default-scheduler  0/0 nodes are available" in events
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": NS},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
        },
    }
    await api.apply([claim])
    await api.record_event("ResourceClaim", "gpu", "Waiting", "no device yet", namespace=NS, component="me")
    described = (await kubectl(kube, "describe", "resourceclaim", "gpu", "-n", NS)).out
    assert "Device Class Name:  gpu.example.com" in described
    assert "Normal  Waiting" in described.split("Events:", 1)[1]
    node = await kubectl(kube, "describe", "node", "node-x", check=False)
    assert node.rc == 1 and 'nodes "node-x" not found' in node.err


async def test_explain(kube: Kube) -> None:
    out = (await kubectl(kube, "explain", "resourceclaim.spec")).out
    assert "GROUP:      resource.k8s.io" in out and "KIND:       ResourceClaim" in out
    assert "VERSION:    v1" in out
    assert "devices\t<DeviceClaim>" in out
    deeper = (await kubectl(kube, "explain", "resourceclaims.spec.devices.requests")).out
    assert "exactly\t<ExactDeviceRequest>" in deeper and "firstAvailable\t<[]DeviceSubRequest>" in deeper
    pod = (await kubectl(kube, "explain", "pod.spec.resourceClaims")).out
    assert "resourceClaimTemplateName\t<string>" in pod


async def test_aggregated_discovery(kube: Kube) -> None:
    """kubectl asks /api and /apis for aggregated discovery (apidiscovery.k8s.io/v2) and gets
    it: one request each, no request per group version."""
    result = await kubectl(kube, "api-resources", "-v=8")
    # kubectl -v=8 logs each request (url, headers) and each response (status, headers)
    exchanges = re.findall(
        r'"Request" verb="GET" url="([^"?]+)[^"]*" headers=<\n\tAccept: ([^\n]+).*?'
        r'"Response" status="([^"]+)" headers=<.*?Content-Type: ([^\n]+)',
        result.err,
        re.S,
    )
    aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    assert [(url.removeprefix(kube.url), status, ctype) for url, _, status, ctype in exchanges] == [
        ("/api", "200 OK", aggregated),
        ("/apis", "200 OK", aggregated),
    ], result.err  # and no request per group version: the legacy documents were not needed
    assert all(accept.startswith(aggregated) for _, accept, _, _ in exchanges)
    rows = {tuple(line.split()) for line in result.out.splitlines()}
    assert ("pods", "po", "v1", "true", "Pod") in rows
    assert ("resourceclaims", "resource.k8s.io/v1", "true", "ResourceClaim") in rows
    assert ("deployments", "deploy", "apps/v1", "true", "Deployment") in rows

    # the document itself, and plain JSON still gets the legacy one
    code, body = await http(kube, "GET", "/apis", accept=f"{aggregated},application/json")
    doc = json.loads(body)
    assert code == 200 and (doc["kind"], doc["apiVersion"]) == (
        "APIGroupDiscoveryList",
        "apidiscovery.k8s.io/v2",
    )
    resource_group = next(g for g in doc["items"] if g["metadata"]["name"] == "resource.k8s.io")
    assert [v["version"] for v in resource_group["versions"]] == ["v1", "v1beta2", "v1beta1", "v1alpha3", "v1alpha2"]
    claims = next(r for r in resource_group["versions"][0]["resources"] if r["resource"] == "resourceclaims")
    assert claims["scope"] == "Namespaced" and claims["responseKind"]["kind"] == "ResourceClaim"
    assert claims["subresources"][0]["subresource"] == "status"
    code, body = await http(kube, "GET", "/api", accept=f"{aggregated},application/json")
    (core,) = json.loads(body)["items"]
    assert core["metadata"]["name"] == "" and core["versions"][0]["version"] == "v1"
    code, body = await http(kube, "GET", "/apis")
    assert json.loads(body)["kind"] == "APIGroupList"
    # client-go before 1.30 (k9s and controllers built with it) asks for v2beta1 first
    older = aggregated.replace("v=v2;", "v=v2beta1;")
    code, body = await http(kube, "GET", "/apis", accept=f"{older},application/json")
    assert code == 200 and json.loads(body)["apiVersion"] == "apidiscovery.k8s.io/v2beta1"
    assert json.loads(body)["items"] == doc["items"]
