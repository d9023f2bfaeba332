"""The DRA node service's messages <-> ``draflow.services.dra.kubeletplugin`` values, per version.

v1 and v1beta1 have the same messages (only the package differs), so one set of conversions serves
both: each takes the version's generated module. The kubelet (client) and the plugin library
(server) both go through here, so what one side encodes the other decodes the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from draflow.services.dra.kubeletplugin import Device, PrepareResult
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.runtime.kubeletapi.dra.v1 import api_pb2 as v1_pb2
from draflow.services.runtime.kubeletapi.dra.v1 import api_pb2_grpc as v1_grpc
from draflow.services.runtime.kubeletapi.dra.v1beta1 import api_pb2 as v1beta1_pb2
from draflow.services.runtime.kubeletapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc

__all__ = [
    "DRA_PLUGIN_TYPE",
    "VERSIONS",
    "Version",
    "claims_from_request",
    "pick_version",
    "prepare_request",
    "prepare_response",
    "prepare_results",
    "unprepare_request",
    "unprepare_response",
    "unprepare_results",
]

DRA_PLUGIN_TYPE = "DRAPlugin"  # PluginInfo.type of a DRA driver (upstream's DRAPlugin plugin type)


@dataclass(frozen=True, slots=True)
class Version:
    """One released version of the service: the name a plugin advertises in ``supported_versions``
    (upstream's ``DRAPluginService`` constants) and its generated modules."""

    service: str
    pb2: ModuleType
    grpc: ModuleType

    @property
    def full_name(self) -> str:
        """The gRPC service's full name on the wire."""
        return str(self.pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name)


V1 = Version("v1.DRAPlugin", v1_pb2, v1_grpc)
V1BETA1 = Version("v1beta1.DRAPlugin", v1beta1_pb2, v1beta1_grpc)
# in the kubelet's order of preference: the newest first, as upstream picks v1 over v1beta1
VERSIONS: tuple[Version, ...] = (V1, V1BETA1)
BY_SERVICE = {v.service: v for v in VERSIONS}


def pick_version(supported: Sequence[str]) -> Version | None:
    """The newest version both sides speak, or None (the plugin is refused)."""
    offered = set(supported)
    return next((v for v in VERSIONS if v.service in offered), None)


def _claims(pb2: ModuleType, claims: Sequence[ClaimRef]) -> list[Any]:
    return [pb2.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


def prepare_request(version: Version, claims: Sequence[ClaimRef]) -> Any:
    return version.pb2.NodePrepareResourcesRequest(claims=_claims(version.pb2, claims))


def unprepare_request(version: Version, claims: Sequence[ClaimRef]) -> Any:
    return version.pb2.NodeUnprepareResourcesRequest(claims=_claims(version.pb2, claims))


def claims_from_request(request: Any) -> list[ClaimRef]:
    """The claims of either request (both carry ``repeated Claim claims = 1``)."""
    return [ClaimRef(namespace=c.namespace, uid=c.uid, name=c.name) for c in request.claims]


def prepare_response(version: Version, results: Mapping[str, PrepareResult]) -> Any:
    out = version.pb2.NodePrepareResourcesResponse()
    for uid, result in results.items():
        entry = out.claims[uid]
        if result.error:
            entry.error = result.error
            continue
        for d in result.devices:
            entry.devices.add(
                request_names=list(d.request_names),
                pool_name=d.pool_name,
                device_name=d.device_name,
                cdi_device_ids=list(d.cdi_device_ids),
            )
    return out


def prepare_results(response: Any) -> dict[str, PrepareResult]:
    """A ``NodePrepareResourcesResponse`` as per-claim results (devices dropped on error, as the
    kubelet must ignore them)."""
    out: dict[str, PrepareResult] = {}
    for uid, entry in response.claims.items():
        if entry.error:
            out[uid] = PrepareResult(error=entry.error)
            continue
        out[uid] = PrepareResult(
            devices=tuple(
                Device(
                    request_names=tuple(d.request_names),
                    pool_name=d.pool_name,
                    device_name=d.device_name,
                    cdi_device_ids=tuple(d.cdi_device_ids),
                )
                for d in entry.devices
            )
        )
    return out


def unprepare_response(version: Version, results: Mapping[str, str | None]) -> Any:
    out = version.pb2.NodeUnprepareResourcesResponse()
    for uid, error in results.items():
        out.claims[uid].error = error or ""
    return out


def unprepare_results(response: Any) -> dict[str, str | None]:
    return {uid: (entry.error or None) for uid, entry in response.claims.items()}
