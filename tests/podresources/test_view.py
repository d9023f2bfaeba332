"""What the API reports, from the kubelet's state alone (pure: no socket, no bus)."""

from __future__ import annotations

import msgspec

from events.api.core_v1 import (
    Container,
    ContainerExtendedResourceRequest,
    PodExtendedResourceClaimStatus,
    ResourceRequirements,
)
from services.dra.kubeletplugin import Device, PrepareResult
from services.dra.resourceclaim import ClaimRef
from services.kubelet.devices import DeviceManager
from services.kubelet.manager import DRAManager
from services.kubelet.podresources.view import (
    ClaimDevice,
    ClaimView,
    active_pods,
    find_pod,
    pod_view,
)
from services.kubelet.state import ClaimInfo, DeviceState
from tests.builders import make_container, make_pod


def _info(
    name: str, *devices: tuple[str, str, tuple[str, ...]], driver: str = "gpu.example.com"
) -> ClaimInfo:
    """devices: (device, request, cdi ids)."""
    return ClaimInfo(
        claim_uid=f"uid-{name}",
        claim_name=name,
        namespace="default",
        pod_uids={"uid-pod"},
        driver_state={
            driver: [
                DeviceState("node-1", d, request_names=(r,) if r else (), cdi_device_ids=c)
                for d, r, c in devices
            ]
        },
    )


def _dev(device: str, *cdi: str) -> ClaimDevice:
    return ClaimDevice("gpu.example.com", "node-1", device, cdi)


def test_container_gets_only_the_devices_of_its_request() -> None:
    two = _info(
        "two", ("gpu-0", "first", ("x/gpu=0",)), ("gpu-1", "second", ("x/gpu=1",)), ("gpu-2", "", ("x/c",))
    )
    pod = make_pod(
        "pod",
        node="node-1",
        claims={"c": "two"},
        containers=[make_container("a", [("c", "first")]), make_container("b", ["c"])],
    )
    view = pod_view(pod, DRAManager([two]))
    a, b = view.containers
    # a device without request names serves every request (as the kubelet hands out CDI ids)
    assert a.claims == (ClaimView("two", "default", (_dev("gpu-0", "x/gpu=0"), _dev("gpu-2", "x/c"))),)
    assert [d.device for d in b.claims[0].devices] == ["gpu-0", "gpu-1", "gpu-2"]


def test_subrequest_results_count_for_their_request() -> None:
    info = _info("c", ("gpu-0", "gpu/small", ("x/0",)))
    pod = make_pod("pod", claims={"c": "c"}, containers=[make_container("a", [("c", "gpu")])])
    assert pod_view(pod, DRAManager([info])).containers[0].claims[0].devices == (_dev("gpu-0", "x/0"),)


def test_template_claim_by_status_and_unprepared_claim_left_out() -> None:
    info = _info("pod-gpu-abcde", ("gpu-3", "gpu", ("x/3",)))
    pod = make_pod("pod", template_claims={"gpu": "t", "other": "t"}, statuses={"gpu": "pod-gpu-abcde"})
    pod = msgspec.structs.replace(
        pod, spec=msgspec.structs.replace(pod.spec, containers=(make_container("ctr", ["gpu", "other"]),))
    )
    (ctr,) = pod_view(pod, DRAManager([info])).containers
    assert ctr.claims == (ClaimView("pod-gpu-abcde", "default", (_dev("gpu-3", "x/3"),)),)


def test_sidecars_first_ordinary_init_containers_not_reported() -> None:
    info = _info("c", ("gpu-0", "", ("x/0",)))
    init = make_container("init", ["c"])
    sidecar = msgspec.structs.replace(make_container("sidecar", ["c"]), restart_policy="Always")
    pod = make_pod("pod", claims={"c": "c"}, containers=[make_container("main", ["c"])])
    pod = msgspec.structs.replace(
        pod, spec=msgspec.structs.replace(pod.spec, init_containers=(init, sidecar))
    )
    view = pod_view(pod, DRAManager([info]))
    assert [c.name for c in view.containers] == ["sidecar", "main"]
    assert all(c.claims[0].devices == (_dev("gpu-0", "x/0"),) for c in view.containers)


def test_extended_resource_claim_through_the_request_mappings() -> None:
    special = _info(
        "pod-extended-resources-xyz",
        ("gpu-0", "container-0-request-0", ("x/0",)),
        ("gpu-1", "container-1-request-0", ("x/1",)),
    )
    gpu = "deviceclass.resource.kubernetes.io/gpu.example.com"
    ctrs = [Container(name=n, resources=ResourceRequirements(requests={gpu: "1"})) for n in ("a", "b")]
    pod = make_pod("pod", containers=[*ctrs, Container(name="plain")])
    mappings = tuple(
        ContainerExtendedResourceRequest(
            container_name=n, resource_name=gpu, request_name=f"container-{i}-request-0"
        )
        for i, n in enumerate(("a", "b"))
    )
    status = PodExtendedResourceClaimStatus(
        request_mappings=mappings, resource_claim_name="pod-extended-resources-xyz"
    )
    pod = msgspec.structs.replace(
        pod, status=msgspec.structs.replace(pod.status, extended_resource_claim_status=status)
    )
    a, b, plain = pod_view(pod, DRAManager([special])).containers
    assert a.claims == (ClaimView("pod-extended-resources-xyz", "default", (_dev("gpu-0", "x/0"),)),)
    assert b.claims[0].devices == (_dev("gpu-1", "x/1"),) and plain.claims == ()


class Classic:
    def container_claims(self, pod: object) -> dict[str, list[tuple[ClaimRef, str, PrepareResult]]]:
        ref = ClaimRef(namespace="default", uid="u1", name="fpga-job-fpga")
        result = PrepareResult(
            devices=(Device(pool_name="node-1", device_name="fpga-2", cdi_device_ids=("f/fpga=u1",)),)
        )
        return {"inference": [(ref, "fpga.example.com", result)]}


def test_classic_claims_and_device_plugin_devices() -> None:
    devices = DeviceManager({"example.com/gpu": 2})
    limits = ResourceRequirements(limits={"example.com/gpu": "1"})
    pod = make_pod("pod", containers=[Container(name="inference", resources=limits)])
    assert devices.allocate(pod)
    (ctr,) = pod_view(pod, DRAManager(), devices, Classic()).containers
    assert ctr.devices == (("example.com/gpu", ("gpu-0",)),)
    assert ctr.claims == (
        ClaimView(
            "fpga-job-fpga", "default", (ClaimDevice("fpga.example.com", "node-1", "fpga-2", ("f/fpga=u1",)),)
        ),
    )


def test_which_pods_are_listed() -> None:
    pods = [
        make_pod("running", node="node-1", phase="Running"),
        make_pod("pending", node="node-1"),
        make_pod("elsewhere", node="node-2", phase="Running"),
        make_pod("done", node="node-1", phase="Succeeded"),
        make_pod("failed", node="node-1", phase="Failed"),
        make_pod("deleting-held", node="node-1", phase="Running", deleting=True),
        make_pod("deleting-released", node="node-1", phase="Running", deleting=True),
        make_pod("a-first", namespace="aaa", node="node-1", phase="Running"),
    ]
    listed = active_pods(pods, "node-1", lambda uid: uid == "uid-deleting-held")
    assert [(p.metadata.namespace, p.metadata.name) for p in listed] == [
        ("aaa", "a-first"),
        ("default", "deleting-held"),
        ("default", "pending"),
        ("default", "running"),
    ]
    assert find_pod(pods, "node-1", "default", "done") is pods[3]  # Get finds any pod of the node
    assert find_pod(pods, "node-1", "default", "elsewhere") is None
