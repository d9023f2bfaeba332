"""A classic driver's kubelet plugin (KEP-3063 NodePrepareResource / NodeUnprepareResource).

Shaped as the kubelet's :class:`services.drivers.api.DRAPlugin` (batched, keyed by claim uid) so
the kubelet can call classic drivers the same way: the plugin finds the claim in its own view
(``observe``), checks that it is Allocated by this driver and usable on this node, and returns the
fully qualified CDI device names; with a ``cdi_root`` it also writes one transient CDI spec per
claim (removed again on unprepare). A claim it has never seen is the KEP's NOT_FOUND error.
Both calls are idempotent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from events.api import classic_v1alpha1 as cv
from services.driver_controller import claims as cl
from services.driver_controller.nodeselect import selector_matches
from services.drivers import cdi
from services.drivers.api import ClaimRef, Device, PrepareResult

__all__ = ["ClassicNodePlugin", "DevicesFor"]

# claim -> [(device name in the pool, CDI device)]
DevicesFor = Callable[[cv.ResourceClaim], list[tuple[str, cdi.CdiDevice]]]


class ClassicNodePlugin:
    """Node part of a classic driver for one node."""

    def __init__(
        self,
        *,
        driver_name: str,
        node_name: str,
        node_labels: Mapping[str, str],
        cdi_vendor: str,
        cdi_class: str,
        devices_for: DevicesFor,
        cdi_root: Path | None = None,
    ) -> None:
        self._driver = driver_name
        self.node_name = node_name
        self.node_labels = dict(node_labels)
        self._vendor, self._class = cdi_vendor, cdi_class
        self._devices_for = devices_for
        self._cdi_root = cdi_root
        self._claims: dict[str, cv.ResourceClaim] = {}
        self._prepared: dict[str, tuple[Device, ...]] = {}

    @property
    def driver_name(self) -> str:
        return self._driver

    @property
    def prepared(self) -> frozenset[str]:
        return frozenset(self._prepared)

    def observe(self, claim: cv.ResourceClaim) -> None:
        self._claims[claim.metadata.uid] = claim

    def forget(self, uid: str) -> None:
        self._claims.pop(uid, None)

    def node_prepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        return {ref.uid: self._prepare(ref) for ref in claims}

    def node_unprepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for ref in claims:
            self._prepared.pop(ref.uid, None)
            if self._cdi_root is not None:
                cdi.remove_spec(self._cdi_root, self._spec_name(ref.uid))
            out[ref.uid] = None
        return out

    def _spec_name(self, uid: str) -> str:
        return cdi.transient_spec_name(self._vendor, self._class, uid)

    def _prepare(self, ref: ClaimRef) -> PrepareResult:
        done = self._prepared.get(ref.uid)
        if done is not None:
            return PrepareResult(devices=done)
        claim = self._claims.get(ref.uid)
        if claim is None or claim.metadata.name != ref.name or claim.metadata.namespace != ref.namespace:
            return PrepareResult(
                error=f"NOT_FOUND: resource claim {ref.namespace}/{ref.name} ({ref.uid}) does not exist"
            )
        if cl.phase(claim) != cv.ALLOCATED or claim.status.driver_name != self._driver:
            return PrepareResult(
                error=f"resource claim {ref.namespace}/{ref.name} is not allocated by {self._driver}"
            )
        available = cl.scheduling(claim).driver.available_on_nodes
        if not selector_matches(available, self.node_name, self.node_labels):
            return PrepareResult(
                error=f"resource claim {ref.namespace}/{ref.name} is not available on {self.node_name}"
            )
        pairs = self._devices_for(claim)
        devices = tuple(
            Device(
                pool_name=self.node_name,
                device_name=name,
                cdi_device_ids=(cdi.qualified_name(self._vendor, self._class, dev.name),),
            )
            for name, dev in pairs
        )
        if self._cdi_root is not None:
            spec = cdi.build_spec(self._vendor, self._class, [dev for _, dev in pairs])
            cdi.write_spec(self._cdi_root, self._spec_name(ref.uid), spec)
        self._prepared[ref.uid] = devices
        return PrepareResult(devices=devices)
