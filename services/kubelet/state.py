"""The kubelet DRA manager's per-claim state, which is what the checkpoint stores.

Field for field upstream ``pkg/kubelet/cm/dra/state`` ``ClaimInfoState``: claim uid, name and
namespace, the uids of the pods on this node that use the claim, and per driver the devices the
driver reported (pool, device, request names, CDI device ids). ``prepared`` is runtime-only, as
upstream: after a restart every claim counts as not prepared and the (idempotent) driver call is
simply made again when a pod asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ClaimInfo", "DeviceState"]


@dataclass(frozen=True, slots=True)
class DeviceState:
    pool_name: str
    device_name: str
    request_names: tuple[str, ...] = ()
    cdi_device_ids: tuple[str, ...] = ()


@dataclass(slots=True)
class ClaimInfo:
    claim_uid: str
    claim_name: str
    namespace: str
    pod_uids: set[str] = field(default_factory=set)
    # Every driver with results in the allocation has an entry, even one that reports no devices.
    driver_state: dict[str, list[DeviceState]] = field(default_factory=dict)
    prepared: bool = False

    def cdi_device_ids(self, request: str = "") -> list[str]:
        """CDI ids of the devices for ``request`` (all when empty; ``req/sub`` results count as ``req``).

        Drivers in name order, so the answer is the same every time (upstream iterates a Go map).
        """
        ids: list[str] = []
        for driver in sorted(self.driver_state):
            for device in self.driver_state[driver]:
                if (
                    not request
                    or not device.request_names
                    or any(n == request or n.split("/", 1)[0] == request for n in device.request_names)
                ):
                    ids.extend(device.cdi_device_ids)
        return ids
