"""The generated modules are what grpcio-tools makes of the committed ``api.proto`` (regenerated
into a temporary directory and compared byte for byte)."""

from __future__ import annotations

from pathlib import Path

import pytest

from draflow.services.kubelet.podresources.gen import GENERATED, PROTO, ROOT, generate

pytestmark = pytest.mark.kep3695


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    written = generate(tmp_path)
    here = PROTO.parent
    assert [p.name for p in written] == list(GENERATED)
    for path in written:
        committed = here / path.name
        assert committed.read_bytes() == path.read_bytes(), (
            f"{committed.relative_to(ROOT)} is stale: run python -m draflow.services.kubelet.podresources.gen"
        )


def test_service_and_package_are_upstreams() -> None:
    from draflow.services.kubelet.podresources.v1 import api_pb2

    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]
