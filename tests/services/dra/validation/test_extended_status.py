"""``pod.status.extendedResourceClaimStatus`` validation (KEP-5004 "Pod API"): pure, no I/O.

Its rules differ from ``resourceClaimStatuses``': each mapping names a container of the pod (init
or regular) and an extended resource that container requests (requests are defaulted from limits),
a DNS-label request name, no mapping twice, and the claim name is required.
"""

from __future__ import annotations

import msgspec
import pytest

from draflow.events.api.core_v1 import (
    ContainerExtendedResourceRequest,
    Pod,
    PodExtendedResourceClaimStatus,
    PodStatus,
)
from draflow.services.apiserver.admission import admit
from draflow.services.apiserver.admission.served import validate_object
from tests.builders import make_container, make_pod

pytestmark = pytest.mark.kep5004

GPU = "example.com/gpu"


def _pod_with(*mappings: tuple[str, str, str], claim: str = "p-extended-resources-x7k2q") -> Pod:
    base = admit(
        make_pod(
            "p",
            containers=(make_container("main", limits={GPU: 1}),),
            init_containers=(make_container("setup", limits={GPU: 2}),),
        )
    )
    assert isinstance(base, Pod)
    status = PodExtendedResourceClaimStatus(
        resource_claim_name=claim,
        request_mappings=tuple(
            ContainerExtendedResourceRequest(container_name=c, resource_name=r, request_name=q)
            for c, r, q in mappings
        ),
    )
    return msgspec.structs.replace(base, status=PodStatus(extended_resource_claim_status=status))


def _problems(p: Pod) -> list[str]:
    return [f"{e.path}: {e.rule}" for e in validate_object(p, p)]


def test_a_status_as_the_scheduler_writes_it_is_valid() -> None:
    ok = _pod_with(("setup", GPU, "container-0-request-0"), ("main", GPU, "container-1-request-0"))
    assert _problems(ok) == []


@pytest.mark.parametrize(
    ("mappings", "claim", "expected"),
    [
        (
            (),
            "c",
            "status.extendedResourceClaimStatus.requestMappings: Required value: "
            "at least one request mapping is required",
        ),
        (
            (("sidecar", GPU, "r0"),),
            "c",
            'status.extendedResourceClaimStatus.requestMappings[0].containerName: Invalid value: "sidecar": '
            "must match the name of an entry in spec.initContainers.name or spec.containers.name",
        ),
        (
            (("main", "example.com/fpga", "r0"),),
            "c",
            "status.extendedResourceClaimStatus.requestMappings[0].resourceName: Invalid value: "
            '"example.com/fpga": must match the extended resource name of an entry in '
            "spec.initContainers.resources.requests or spec.containers.resources.requests",
        ),
        (
            (("main", GPU, "Request_0"),),
            "c",
            'status.extendedResourceClaimStatus.requestMappings[0].requestName: Invalid value: "Request_0": '
            "a lowercase RFC 1123 label must consist of",
        ),
        (
            (("main", GPU, "r0"), ("main", GPU, "r0")),
            "c",
            "status.extendedResourceClaimStatus.requestMappings[1]: "
            'Duplicate value: "main/example.com/gpu/r0"',
        ),
        ((("main", GPU, "r0"),), "", "status.extendedResourceClaimStatus.resourceClaimName: Required value"),
        (
            (("main", GPU, "r0"),),
            "Bad_Name",
            'status.extendedResourceClaimStatus.resourceClaimName: Invalid value: "Bad_Name": '
            "a lowercase RFC 1123 subdomain must consist of",
        ),
    ],
)
def test_each_rule_names_the_field(
    mappings: tuple[tuple[str, str, str], ...], claim: str, expected: str
) -> None:
    problems = _problems(_pod_with(*mappings, claim=claim))
    assert len(problems) == 1 and problems[0].startswith(expected), problems
