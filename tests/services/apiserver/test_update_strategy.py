"""Apply onto an existing object through the real apiserver: what the server and controllers wrote
survives, an unchanged manifest is ``unchanged`` and appends nothing, and what Kubernetes makes
immutable is refused in its words (issue 13: re-applying a bound pod unbound it)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from draflow.events.api.core_v1 import PodResourceClaimStatus
from draflow.events.dra import PodBound, PodClaimStatusesRecorded, PodStarted
from draflow.infra.eventstore import EventStore
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import ItemResult

NS = "default"
UPDATABLE = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def pod(
    name: str = "pod0", *, template: bool = False, image: str = "ubuntu:22.04", **spec: Any
) -> dict[str, Any]:
    """The README's pod (basic-resourceclaimtemplate), optionally without its claim."""
    ctr: dict[str, Any] = {"name": "ctr0", "image": image, "command": ["bash", "-c"], "args": ["sleep 9999"]}
    body: dict[str, Any] = {"containers": [ctr], **spec}
    if template:
        ctr["resources"] = {"claims": [{"name": "gpu"}]}
        body["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "pod"}},
        "spec": body,
    }


TEMPLATE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "single-gpu", "namespace": NS},
    "spec": {
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
        }
    },
}


async def one(api: ApiClient, manifest: dict[str, Any]) -> ItemResult:
    (result,) = await api.apply([manifest])
    return result


async def running(api: ApiClient, store: EventStore, manifest: dict[str, Any], node: str = "node-1") -> None:
    """Create the pod, then record what the scheduler and the kubelet would: bound, claim status, Running."""
    assert (await one(api, manifest)).outcome == "created"
    name = manifest["metadata"]["name"]
    facts: list[Any] = [PodBound(node_name=node, at="2025-01-01T00:00:00Z")]
    if "resourceClaims" in manifest["spec"]:
        status = PodResourceClaimStatus(name="gpu", resource_claim_name=f"{name}-gpu-x7k2p")
        facts.insert(0, PodClaimStatusesRecorded(statuses=(status,)))
    facts.append(PodStarted(at="2025-01-01T00:00:01Z", host_ip="10.0.0.1", pod_ip="10.1.0.1"))
    await store.append(store.subject("Pod", NS, name), facts, expected_last_seq=None)
    await api.get("Pod", name, namespace=NS, min_resource_version=await store.stream_last_seq())


@pytest.mark.parametrize("template", [False, True], ids=["plain", "claim-template"])
async def test_reapplying_a_running_pod_is_unchanged_and_appends_nothing(
    api: ApiClient, event_store: EventStore, template: bool
) -> None:
    if template:
        assert (await one(api, TEMPLATE)).outcome == "created"
    await running(api, event_store, pod(template=template))
    before = await api.get("Pod", "pod0", namespace=NS)
    last = await event_store.stream_last_seq()

    results = await api.apply([pod(template=template), *([TEMPLATE] if template else [])])
    assert [r.outcome for r in results] == ["unchanged"] * len(results)
    assert await event_store.stream_last_seq() == last  # nothing appended
    after = await api.get("Pod", "pod0", namespace=NS)
    assert after == before
    assert after["spec"]["nodeName"] == "node-1" and after["status"]["phase"] == "Running"
    assert after["metadata"]["generation"] == 1
    if template:
        assert after["status"]["resourceClaimStatuses"] == [
            {"name": "gpu", "resourceClaimName": "pod0-gpu-x7k2p"}
        ]


async def test_a_new_image_keeps_the_binding_and_what_defaulting_filled_in(
    api: ApiClient, event_store: EventStore
) -> None:
    await running(api, event_store, pod(image="busybox"))
    stored = await api.get("Pod", "pod0", namespace=NS)
    assert stored["spec"]["containers"][0]["imagePullPolicy"] == "Always"  # defaulted for :latest

    result = await one(api, pod(image="busybox:1.36"))
    assert (result.outcome, result.error) == ("configured", None)
    after = await api.get("Pod", "pod0", namespace=NS)
    ctr = after["spec"]["containers"][0]
    # kubectl's patch names only the image: the defaulted pull policy stays as stored
    assert (ctr["image"], ctr["imagePullPolicy"]) == ("busybox:1.36", "Always")
    assert after["spec"]["nodeName"] == "node-1" and after["status"] == stored["status"]
    assert after["metadata"]["generation"] == 2


def _message(result: ItemResult) -> str:
    assert result.error is not None and result.outcome == "", result
    assert (result.error.code, result.error.reason, result.operation) == (422, "Invalid", "update")
    return result.error.message


@pytest.mark.parametrize(
    ("change", "diff"),
    [
        ({"nodeSelector": {"disktype": "ssd"}}, ['+ spec.nodeSelector: {"disktype":"ssd"}']),
        ({"nodeName": "node-2"}, ['- spec.nodeName: "node-1"', '+ spec.nodeName: "node-2"']),
        ({"restartPolicy": "Never"}, ['- spec.restartPolicy: "Always"', '+ spec.restartPolicy: "Never"']),
    ],
    ids=["node-selector", "node-name", "restart-policy"],
)
async def test_a_changed_pod_spec_is_forbidden_and_appends_nothing(
    api: ApiClient, event_store: EventStore, change: dict[str, Any], diff: list[str]
) -> None:
    await running(api, event_store, pod())
    last = await event_store.stream_last_seq()
    message = _message(await one(api, pod(**change)))
    head, *lines = message.split("\n")
    assert head == f'Pod "default/pod0" is invalid: spec: Forbidden: {UPDATABLE}'
    assert lines == diff
    assert await event_store.stream_last_seq() == last
    assert (await api.get("Pod", "pod0", namespace=NS))["spec"]["nodeName"] == "node-1"


async def test_binding_is_not_an_apply(api: ApiClient) -> None:
    assert (await one(api, pod())).outcome == "created"
    message = _message(await one(api, pod(nodeName="node-1")))
    assert message.endswith('+ spec.nodeName: "node-1"') and "spec: Forbidden: pod updates may not" in message


async def test_pod_update_rules(api: ApiClient, event_store: EventStore) -> None:
    tol = {"key": "gpu", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}
    base = pod(tolerations=[tol], activeDeadlineSeconds=100)
    await running(api, event_store, base)

    two = copy.deepcopy(base)
    two["spec"]["containers"].append({"name": "side", "image": "busybox"})
    assert _message(await one(api, two)) == (
        'Pod "default/pod0" is invalid: spec.containers: Forbidden: '
        "pod updates may not add or remove containers"
    )
    assert _message(
        await one(
            api, pod(tolerations=[{**tol, "value": "x", "operator": "Equal"}], activeDeadlineSeconds=100)
        )
    ) == (
        'Pod "default/pod0" is invalid: spec.tolerations: Forbidden: '
        "existing toleration can not be modified except its tolerationSeconds"
    )
    assert _message(await one(api, pod(tolerations=[tol], activeDeadlineSeconds=200))) == (
        'Pod "default/pod0" is invalid: spec.activeDeadlineSeconds: Invalid value: 200: '
        "must be less than or equal to previous value"
    )
    assert _message(await one(api, pod(tolerations=[tol]))) == (
        'Pod "default/pod0" is invalid: spec.activeDeadlineSeconds: Invalid value: null: '
        "must not update from a positive integer to nil value"
    )
    # what may change: a lower deadline, another toleration, a new tolerationSeconds, labels
    allowed = pod(
        tolerations=[{**tol, "tolerationSeconds": 30}, {"key": "b", "operator": "Exists"}],
        activeDeadlineSeconds=50,
    )
    allowed["metadata"]["labels"] = {"app": "pod", "tier": "gpu"}
    assert (await one(api, allowed)).outcome == "configured"
    after = await api.get("Pod", "pod0", namespace=NS)
    own = [t for t in after["spec"]["tolerations"] if not t["key"].startswith("node.kubernetes.io/")]
    assert after["spec"]["activeDeadlineSeconds"] == 50 and len(own) == 2  # + DefaultTolerationSeconds
    assert after["spec"]["nodeName"] == "node-1" and after["metadata"]["labels"]["tier"] == "gpu"


async def test_scheduling_gates_may_only_go_and_gated_pods_may_gain_node_selectors(api: ApiClient) -> None:
    gated = pod(schedulingGates=[{"name": "a"}, {"name": "b"}], nodeSelector={"zone": "1"})
    assert (await one(api, gated)).outcome == "created"
    more = pod(schedulingGates=[{"name": "a"}, {"name": "c"}], nodeSelector={"zone": "1"})
    assert _message(await one(api, more)) == (
        'Pod "default/pod0" is invalid: spec.schedulingGates[1].name: Forbidden: '
        "only deletion is allowed, but found new scheduling gate 'c'"
    )
    changed = pod(schedulingGates=[{"name": "a"}], nodeSelector={"zone": "2"})
    assert _message(await one(api, changed)) == (
        'Pod "default/pod0" is invalid: spec.nodeSelector: Invalid value: {"zone":"2"}: '
        "only additions to spec.nodeSelector are allowed (no mutations or deletions)"
    )
    added = pod(schedulingGates=[{"name": "a"}], nodeSelector={"zone": "1", "rack": "r7"})
    assert (await one(api, added)).outcome == "configured"
    ungated = pod(nodeSelector={"zone": "1", "rack": "r7"})
    assert (await one(api, ungated)).outcome == "configured"
    assert "schedulingGates" not in (await api.get("Pod", "pod0", namespace=NS))["spec"]
    # no longer gated: the node selector is as immutable as the rest
    assert "spec: Forbidden" in _message(await one(api, pod(nodeSelector={"zone": "1"})))


# -- the other kinds ----------------------------------------------------------------------------------

DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": NS},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
    },
}

JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "train", "namespace": NS},
    "spec": {
        "suspend": True,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
    },
}


async def test_deployment_selector_is_immutable_the_rest_rolls_out(api: ApiClient) -> None:
    assert (await one(api, DEPLOYMENT)).outcome == "created"
    assert (await one(api, DEPLOYMENT)).outcome == "unchanged"
    scaled = copy.deepcopy(DEPLOYMENT)
    scaled["spec"]["replicas"] = 3
    scaled["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:1.36"
    assert (await one(api, scaled)).outcome == "configured"
    stored = await api.get("Deployment", "web", namespace=NS)
    ctr = stored["spec"]["template"]["spec"]["containers"][0]
    assert stored["spec"]["replicas"] == 3 and ctr["imagePullPolicy"] == "Always"
    moved = copy.deepcopy(scaled)
    moved["spec"]["selector"] = {"matchLabels": {"app": "web", "v": "2"}}
    moved["spec"]["template"]["metadata"]["labels"]["v"] = "2"
    assert _message(await one(api, moved)) == (
        'Deployment.apps "default/web" is invalid: spec.selector: Invalid value: '
        '{"matchLabels":{"app":"web","v":"2"}}: field is immutable'
    )


async def test_job_template_is_immutable_but_for_scheduling_directives_while_suspended(
    api: ApiClient,
) -> None:
    assert (await one(api, JOB)).outcome == "created"
    assert (await one(api, JOB)).outcome == "unchanged"
    placed = copy.deepcopy(JOB)
    placed["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "1"}
    assert (await one(api, placed)).outcome == "configured"  # suspended, never started
    other = copy.deepcopy(placed)
    other["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    assert _message(await one(api, other)) == (
        'Job.batch "default/train" is invalid: spec.template: Invalid value: field is immutable'
    )
    resumed = copy.deepcopy(placed)
    resumed["spec"]["suspend"] = False
    assert (await one(api, resumed)).outcome == "configured"
    moved = copy.deepcopy(resumed)
    moved["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "2"}
    assert "spec.template: Invalid value: field is immutable" in _message(await one(api, moved))
    more = copy.deepcopy(resumed)
    more["spec"]["completions"] = 4
    assert "spec.completions: Invalid value: 4: field is immutable" in _message(await one(api, more))


async def test_claim_template_spec_is_immutable(api: ApiClient) -> None:
    assert (await one(api, TEMPLATE)).outcome == "created"
    assert (await one(api, TEMPLATE)).outcome == "unchanged"  # defaulted allocationMode/count kept
    changed = copy.deepcopy(TEMPLATE)
    changed["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    assert _message(await one(api, changed)) == (
        'ResourceClaimTemplate.resource.k8s.io "default/single-gpu" is invalid: spec: Invalid value: null: '
        "field is immutable"
    )


async def test_node_pod_cidr_is_kept_and_set_once(api: ApiClient) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "spec": {"podCIDR": "10.1.0.0/24"},
    }
    assert (await one(api, node)).outcome == "created"
    tainted = {**node, "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}
    assert (await one(api, tainted)).outcome == "configured"  # the IPAM's podCIDR stays
    stored = await api.get("Node", "n1")
    assert stored["spec"] == {"podCIDR": "10.1.0.0/24", "taints": [{"key": "gpu", "effect": "NoSchedule"}]}
    assert (await one(api, {**node, "spec": {}})).outcome == "configured"  # the taint goes
    assert "taints" not in (await api.get("Node", "n1"))["spec"]
    moved = {**node, "spec": {"podCIDR": "10.2.0.0/24"}}
    assert _message(await one(api, moved)) == (
        'Node "n1" is invalid: spec.podCIDRs: Forbidden: '
        'node updates may not change podCIDR except from "" to valid'
    )


async def test_device_class_fields_left_out_are_removed(api: ApiClient) -> None:
    cls = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {"extendedResourceName": "example.com/gpu"},
    }
    assert (await one(api, cls)).outcome == "created"
    assert (await one(api, {**cls, "spec": {}})).outcome == "configured"
    assert "extendedResourceName" not in (await api.get("DeviceClass", "gpu.example.com")).get("spec", {})


RULE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1alpha3",
    "kind": "DeviceTaintRule",
    "metadata": {"name": "broken"},
    "spec": {
        "deviceSelector": {"driver": "gpu.example.com"},
        "taint": {"key": "example.com/broken", "value": "yes", "effect": "NoExecute"},
    },
}
SLICE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-1-gpu"},
    "spec": {
        "driver": "gpu.example.com",
        "nodeName": "node-1",
        "pool": {"name": "node-1", "resourceSliceCount": 1},
        "devices": [{"name": "gpu-0", "taints": [{"key": "example.com/hot", "effect": "NoSchedule"}]}],
    },
}


async def test_device_taints_get_their_time_added_once(api: ApiClient) -> None:
    """Issue 23 item 4: a device taint without ``timeAdded`` (a DeviceTaintRule's, a slice
    device's) gets the time of the write, as upstream's defaulting; the same manifest applied
    again keeps it (unchanged); a changed taint gets a new one; a time the manifest sets stays."""
    (res,) = await api.apply([copy.deepcopy(RULE)])
    assert res.error is None, res.error
    added = (await api.get("DeviceTaintRule", "broken"))["spec"]["taint"]["timeAdded"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", added)
    (again,) = await api.apply([copy.deepcopy(RULE)])
    assert again.outcome == "unchanged"
    changed = copy.deepcopy(RULE)
    changed["spec"]["taint"]["value"] = "very"
    changed["spec"]["taint"]["timeAdded"] = "2026-01-01T00:00:00Z"
    (res,) = await api.apply([changed])
    assert res.error is None and res.outcome == "configured"
    rule = await api.get("DeviceTaintRule", "broken")
    assert rule["spec"]["taint"]["timeAdded"] == "2026-01-01T00:00:00Z"
    assert rule["metadata"]["generation"] == 2

    (res,) = await api.apply([copy.deepcopy(SLICE)])
    assert res.error is None, res.error
    (taint,) = (await api.get("ResourceSlice", "node-1-gpu"))["spec"]["devices"][0]["taints"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", taint["timeAdded"])
    (again,) = await api.apply([copy.deepcopy(SLICE)])
    assert again.outcome == "unchanged"
