"""From the special claim to each container's CDI devices: scheduler output → kubelet input."""

from __future__ import annotations

import msgspec

from events.api.core_v1 import Pod
from events.api.resource_v1 import DeviceClass, ResourceClaimStatus, ResourceSlice
from services.dra.extended import (
    ExtendedResourceIndex,
    claim_for_create,
    claim_status,
    decide_node,
    new_in_memory_claim,
)
from services.dra.structured import Allocator
from services.kubelet.manager import DRAManager
from services.kubelet.state import ClaimInfo, DeviceState
from tests.extended.helpers import EXAMPLES, container, load, pod

GPU = "example.com/gpu"


def test_each_container_gets_the_devices_of_its_own_requests() -> None:
    (dc,) = load(EXAMPLES / "deviceclass.yaml")
    (rs,) = load(EXAMPLES / "resourceslice-runnable.yaml")
    n_dra, _ = load(EXAMPLES / "nodes.yaml")
    assert isinstance(dc, DeviceClass) and isinstance(rs, ResourceSlice)
    p = pod(
        "job",
        init=(container("setup", requests={GPU: 3}),),
        containers=(container("main", requests={GPU: 1}), container("side", requests={GPU: 2})),
    )
    index = ExtendedResourceIndex.from_classes([dc])
    d = decide_node(p, new_in_memory_claim(p), {}, index)
    assert d.claim is not None
    assert n_dra.__class__.__name__ == "Node"
    results = Allocator([rs], {dc.metadata.name: dc}).allocate(n_dra, [d.claim])  # type: ignore[arg-type]
    assert results is not None
    (allocation,) = results
    # PreBind: the claim is created (generated name), allocated and the pod status written
    stored = claim_for_create(d.claim)
    stored = msgspec.structs.replace(
        stored,
        metadata=msgspec.structs.replace(stored.metadata, name="job-extended-resources-q8x2z", uid="u-claim"),
        status=ResourceClaimStatus(allocation=allocation),
    )
    bound = msgspec.structs.replace(
        p,
        status=msgspec.structs.replace(
            p.status, extended_resource_claim_status=claim_status(stored.metadata.name, d.mappings)
        ),
    )
    assert isinstance(bound, Pod)
    # what the driver reports after NodePrepareResources: one CDI id per allocated device
    states = [
        DeviceState(
            pool_name=r.pool,
            device_name=r.device,
            request_names=(r.request,),
            cdi_device_ids=(f"{r.driver}/gpu={r.device}",),
        )
        for r in allocation.devices.results
    ]
    info = ClaimInfo(
        claim_uid="u-claim",
        claim_name=stored.metadata.name,
        namespace="default",
        pod_uids={p.metadata.uid},
        driver_state={"gpu.example.com": states},
    )
    got = DRAManager([info]).pod_cdi_devices(bound)
    by_request = {r.request: r.device for r in allocation.devices.results}
    cdi = {req: f"gpu.example.com/gpu={dev}" for req, dev in by_request.items()}
    # main = container-1, side = container-2 (two devices); setup reuses main's and side's
    # devices (1 + 2 = 3) and needs no request of its own
    assert sorted(by_request) == ["container-1-request-0", "container-2-request-0"]
    assert got["main"] == [cdi["container-1-request-0"]]
    side_devices = [
        f"gpu.example.com/gpu={r.device}"
        for r in allocation.devices.results
        if r.request == "container-2-request-0"
    ]
    assert got["side"] == side_devices and len(side_devices) == 2
    assert sorted(got["setup"]) == sorted([cdi["container-1-request-0"], *side_devices])
    assert len(allocation.devices.results) == 3  # the pod's PodRequests: max(3, 1 + 2)
