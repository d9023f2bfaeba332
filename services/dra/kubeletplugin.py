"""The kubelet <-> DRA driver node plugin boundary, shaped like Kubernetes' gRPC API.

Mirrors ``k8s.io/kubelet/pkg/apis/dra/v1/api.proto`` (service ``DRAPlugin``):

* ``NodePrepareResources({claims: [{namespace, uid, name}]})`` returns, per claim uid, the devices
  the kubelet must hand to the runtime (``request_names``, ``pool_name``, ``device_name``,
  ``cdi_device_ids``, optional ``share_id``) or an ``error``; a claim missing from the answer counts
  as not prepared and is asked for again;
* ``NodeUnprepareResources`` takes the same claims and returns an error (or nothing) per uid.

Calls are batched per driver and must be idempotent: the kubelet repeats them after a restart or a
partial failure. The driver reads each claim's allocation itself (from its own view of the API),
exactly as upstream. A whole-call failure (the gRPC error) is :class:`PluginError`. Keeping the
same shape lets a later issue put the real gRPC interface on this Protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec

from services.dra.resourceclaim import ClaimRef

__all__ = ["ClaimRef", "DRAPlugin", "Device", "PluginError", "PrepareResult", "base_request"]


class Device(msgspec.Struct, frozen=True, kw_only=True):
    """One prepared device. Empty ``request_names``: associated with every request of the claim."""

    pool_name: str
    device_name: str
    request_names: tuple[str, ...] = ()
    cdi_device_ids: tuple[str, ...] = ()
    share_id: str | None = None


class PrepareResult(msgspec.Struct, frozen=True, kw_only=True):
    """``NodePrepareResourceResponse``: a non-empty ``error`` means failure (devices are ignored)."""

    devices: tuple[Device, ...] = ()
    error: str = ""


class PluginError(Exception):
    """The whole call failed (unreachable plugin, transport error): no per-claim result at all."""


@runtime_checkable
class DRAPlugin(Protocol):
    """A DRA driver's node plugin as the kubelet sees it."""

    @property
    def driver_name(self) -> str: ...

    def node_prepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Prepare the claims; result keyed by claim uid."""
        ...

    def node_unprepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, str | None]:
        """Undo preparation; per claim uid an error message or None."""
        ...


def base_request(name: str) -> str:
    """``req`` for a subrequest reference ``req/sub`` (upstream ``resourceclaim.BaseRequestRef``)."""
    return name.split("/", 1)[0]
