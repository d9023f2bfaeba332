"""The generated modules of the kubelet plugin APIs are what grpcio-tools makes of the committed
protos (regenerated into a temporary directory and compared byte for byte), and the wire names
are upstream's."""

from __future__ import annotations

from pathlib import Path

import pytest

from draflow.services.runtime.kubeletapi.gen import GENERATED, PROTOS, ROOT, generate

pytestmark = pytest.mark.kep4381


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    written = generate(tmp_path)
    assert len(written) == len(PROTOS) * len(GENERATED)
    for path in written:
        committed = ROOT / "draflow" / path.relative_to(tmp_path / "draflow")
        assert committed.read_bytes() == path.read_bytes(), (
            f"{committed} is stale: run python -m draflow.services.runtime.kubeletapi.gen"
        )


def test_services_and_fields_are_upstreams() -> None:
    from draflow.services.runtime.kubeletapi.dra.v1 import api_pb2 as v1
    from draflow.services.runtime.kubeletapi.dra.v1beta1 import api_pb2 as v1beta1
    from draflow.services.runtime.kubeletapi.pluginregistration.v1 import api_pb2 as reg

    registration = reg.DESCRIPTOR.services_by_name["Registration"]
    assert registration.full_name == "pluginregistration.Registration"
    assert [m.name for m in registration.methods] == ["GetInfo", "NotifyRegistrationStatus"]
    info = reg.PluginInfo.DESCRIPTOR
    assert [(f.name, f.number) for f in info.fields] == [
        ("type", 1),
        ("name", 2),
        ("endpoint", 3),
        ("supported_versions", 4),
    ]
    for module, package in (
        (v1, "k8s.io.kubelet.pkg.apis.dra.v1"),
        (v1beta1, "k8s.io.kubelet.pkg.apis.dra.v1beta1"),
    ):
        service = module.DESCRIPTOR.services_by_name["DRAPlugin"]
        assert service.full_name == f"{package}.DRAPlugin"
        assert [m.name for m in service.methods] == ["NodePrepareResources", "NodeUnprepareResources"]
        device = module.Device.DESCRIPTOR
        assert [(f.name, f.number) for f in device.fields] == [
            ("request_names", 1),
            ("pool_name", 2),
            ("device_name", 3),
            ("cdi_device_ids", 4),
        ]
        claim = module.Claim.DESCRIPTOR
        assert [(f.name, f.number) for f in claim.fields] == [("namespace", 1), ("uid", 2), ("name", 3)]
        result = module.NodePrepareResourceResponse.DESCRIPTOR
        assert [(f.name, f.number) for f in result.fields] == [("devices", 1), ("error", 2)]


def test_the_health_api_is_upstreams() -> None:
    from draflow.services.runtime.kubeletapi.drahealth.v1alpha1 import api_pb2 as health

    service = health.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    assert service.full_name == "v1alpha1.DRAResourceHealth"
    (method,) = service.methods
    assert method.name == "NodeWatchResources" and method.server_streaming and not method.client_streaming
    assert [(v.name, v.number) for v in health.HealthStatus.DESCRIPTOR.values] == [
        ("UNKNOWN", 0),
        ("HEALTHY", 1),
        ("UNHEALTHY", 2),
    ]
    ident = health.DeviceIdentifier.DESCRIPTOR
    assert [(f.name, f.number) for f in ident.fields] == [("pool_name", 1), ("device_name", 2)]
    device = health.DeviceHealth.DESCRIPTOR
    assert [(f.name, f.number) for f in device.fields] == [
        ("device", 1),
        ("health", 2),
        ("last_updated_time", 3),
    ]
    response = health.NodeWatchResourcesResponse.DESCRIPTOR
    assert [(f.name, f.number) for f in response.fields] == [("devices", 1)]


def test_the_capacity_api_is_draflows_rendering_of_the_kep() -> None:
    """Not an upstream proto (KEP-4381's call was never released): draflow's own package, with the
    KEP's NodeResourceInstance fields."""
    from draflow.services.runtime.kubeletapi.dranumeric.v1alpha1 import api_pb2 as numeric

    service = numeric.DESCRIPTOR.services_by_name["NodeResourceCapacity"]
    assert service.full_name == "draflow.dranumeric.v1alpha1.NodeResourceCapacity"
    (method,) = service.methods
    assert method.name == "NodeListAndWatchResources"
    assert method.server_streaming and not method.client_streaming
    instance = numeric.NodeResourceInstance.DESCRIPTOR
    assert [(f.name, f.number) for f in instance.fields] == [
        ("id", 1),
        ("api_version", 2),
        ("kind", 3),
        ("data", 4),
    ]
    response = numeric.NodeListAndWatchResourcesResponse.DESCRIPTOR
    assert [(f.name, f.number) for f in response.fields] == [("instances", 1)]
