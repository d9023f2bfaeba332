"""A classic driver's kubelet plugin (KEP-3063 NodePrepareResource / NodeUnprepareResource).

Shaped as the kubelet's :class:`services.dra.kubeletplugin.DRAPlugin` (batched, keyed by claim uid) so
the kubelet can call classic drivers the same way: the plugin finds the claim in its own view
(``observe``), checks that it is Allocated by this driver and usable on this node, and returns the
fully qualified CDI device names; with a ``cdi_root`` it also writes one transient CDI spec per
claim (removed again on unprepare). A claim it has never seen is the KEP's NOT_FOUND error.
Both calls are idempotent. With a ``state_dir`` the prepared claims (uid -> devices) are
checkpointed there (``checkpoint.json``, written atomically on every change, read at start), so
a restarted kubelet answers a repeated prepare from the checkpoint instead of preparing again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from events.api import classic_v1alpha1 as cv
from services.dra.classic import claims as cl
from services.dra.classic.nodeselect import selector_matches
from services.dra.kubeletplugin import Device, PrepareResult
from services.dra.resourceclaim import ClaimRef
from services.drivers import cdi

__all__ = ["CHECKPOINT", "ClassicNodePlugin", "DevicesFor", "read_json", "write_json"]

CHECKPOINT = "checkpoint.json"
T = TypeVar("T")

# claim -> [(device name in the pool, CDI device)]
DevicesFor = Callable[[cv.ResourceClaim], list[tuple[str, cdi.CdiDevice]]]


def write_json(path: Path, value: object) -> None:
    """Write ``value`` as JSON atomically and durably (a kill mid-write keeps the old file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(msgspec.json.encode(value))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_json(path: Path, type_: Any, default: T) -> T:
    """The file decoded strictly as ``type_``; ``default`` when it does not exist. A file that does
    not decode raises (the kubelet must not forget what it prepared)."""
    if not path.exists():
        return default
    try:
        value: T = msgspec.json.decode(path.read_bytes(), type=type_)
        return value
    except msgspec.DecodeError as exc:
        raise ValueError(f"classic checkpoint {path}: {exc}") from None


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
        state_dir: Path | None = None,
    ) -> None:
        self._driver = driver_name
        self.node_name = node_name
        self.node_labels = dict(node_labels)
        self._vendor, self._class = cdi_vendor, cdi_class
        self._devices_for = devices_for
        self._cdi_root = cdi_root
        self._claims: dict[str, cv.ResourceClaim] = {}
        self._checkpoint = state_dir / CHECKPOINT if state_dir is not None else None
        self._prepared: dict[str, tuple[Device, ...]] = (
            read_json(self._checkpoint, dict[str, tuple[Device, ...]], {}) if self._checkpoint else {}
        )

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
        changed = False
        for ref in claims:
            changed |= self._prepared.pop(ref.uid, None) is not None
            if self._cdi_root is not None:
                cdi.remove_spec(self._cdi_root, self._spec_name(ref.uid))
            out[ref.uid] = None
        if changed:
            self._save()
        return out

    def _save(self) -> None:
        if self._checkpoint is not None:
            write_json(self._checkpoint, dict(sorted(self._prepared.items())))

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
        self._save()
        return PrepareResult(devices=devices)
