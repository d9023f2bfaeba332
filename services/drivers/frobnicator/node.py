"""frobnicator.example.com's kubelet plugin: reports capacity, prepares numeric claims.

* ``capacity()`` answers the KEP's kubelet <-> plugin capacity call: the node's resource instances
  as capacity types of a numeric model (here one ``counter.dra.config.k8s.io/v1alpha1 Capacity``
  holding the node's frobnicators). The plugin library streams it to the kubelet
  (``kubeletplugin.capacity``), which publishes its ``NodeResourceCapacity``; ``set_frobnicators``
  is the hardware changing (``generation`` moves with it). The plugin process is
  ``classic_plugin --driver frobnicator.example.com`` (``FrobnicatorDriver``).
* prepare double-checks what the scheduler allocated (KEP "NodeResourceCapacity"): the instance
  must still exist and hold this claim's count next to the claims already prepared on it;
  otherwise the claim is not prepared, the kubelet reports a Warning and the pod waits until
  the frobnicators return. A prepared claim gets one CDI device whose environment says how many
  frobnicators it has (``FROBNICATORS``), from which instance, and the ``env`` of its
  ``ClaimParameters`` object (embedded in the allocation, so it works after the object is gone).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.numeric_v1alpha2 import NodeResourceInstance
from draflow.services.dra.kubeletplugin import PrepareResult
from draflow.services.dra.numeric import counter
from draflow.services.dra.numeric.model import ModelDecodeError, decode_model_object
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers.cdi import CdiDevice
from draflow.services.drivers.classic_node import ClassicNodePlugin
from draflow.services.drivers.frobnicator import CAPACITY_LABEL, DRIVER_NAME, INSTANCE

__all__ = ["FrobnicatorNodePlugin", "frobnicator_devices"]


def _allocation(claim: cv.ResourceClaim) -> counter.Allocation | None:
    alloc = claim.status.numeric_allocation
    if alloc is None or not alloc.api_version.startswith(f"{counter.GROUP}/"):
        return None
    try:
        decoded: counter.Allocation = decode_model_object(counter.Allocation, alloc.data)
    except ModelDecodeError:
        return None
    return decoded


def frobnicator_devices(claim: cv.ResourceClaim) -> list[tuple[str, CdiDevice]]:
    got = _allocation(claim)
    alloc = claim.status.numeric_allocation
    params: Any = alloc.parameters if alloc is not None else None
    spec = params.get("spec", {}) if isinstance(params, dict) else {}
    env_map = spec.get("env", {}) if isinstance(spec, dict) else {}
    env = [f"FROBNICATORS={got.count if got else 0}", f"FROBNICATOR_INSTANCE={got.instance if got else ''}"]
    if isinstance(env_map, dict):
        env += [f"{k}={v}" for k, v in sorted(env_map.items())]
    return [(got.instance if got else "", CdiDevice(name=claim.metadata.uid, env=tuple(env)))]


class FrobnicatorNodePlugin(ClassicNodePlugin):
    def __init__(
        self,
        *,
        node_name: str,
        node_labels: Mapping[str, str],
        frobnicators: int | None = None,
        cdi_root: Path | None = None,
        state_dir: Path | None = None,
    ) -> None:
        super().__init__(
            driver_name=DRIVER_NAME,
            node_name=node_name,
            node_labels=node_labels,
            cdi_vendor=DRIVER_NAME,
            cdi_class="frobnicator",
            devices_for=frobnicator_devices,
            cdi_root=cdi_root,
            state_dir=state_dir,
        )
        if frobnicators is None:
            frobnicators = int(node_labels.get(CAPACITY_LABEL, "0") or 0)
        self.frobnicators = frobnicators
        self.generation = 1

    def set_frobnicators(self, n: int) -> None:
        """The hardware changed (frobnicators added or lost)."""
        if n != self.frobnicators:
            self.frobnicators = n
            self.generation += 1

    def capacity(self) -> tuple[NodeResourceInstance, ...]:
        if self.frobnicators <= 0:
            return ()
        return (
            NodeResourceInstance(
                id=INSTANCE,
                api_version=f"{counter.GROUP}/v1alpha1",
                kind="Capacity",
                data={"count": self.frobnicators},
            ),
        )

    def _prepare(self, ref: ClaimRef) -> PrepareResult:
        if ref.uid not in self.prepared:
            claim = self._claims.get(ref.uid)
            problem = self._double_check(claim) if claim is not None else None
            if problem is not None:
                return PrepareResult(error=problem)
        return super()._prepare(ref)

    def _double_check(self, claim: cv.ResourceClaim) -> str | None:
        got = _allocation(claim)
        if got is None:
            return None  # not a numeric allocation of ours: the base class says why
        key = f"{claim.metadata.namespace}/{claim.metadata.name}"
        if got.instance != INSTANCE or self.frobnicators <= 0:
            return (
                f"resource claim {key}: frobnicator instance {got.instance!r} is gone from {self.node_name}"
            )
        in_use = 0
        for uid in self.prepared:
            other = self._claims.get(uid)
            other_alloc = _allocation(other) if other is not None else None
            if other_alloc is not None and other_alloc.instance == got.instance:
                in_use += other_alloc.count
        if in_use + got.count > self.frobnicators:
            return (
                f"resource claim {key}: {got.count} frobnicators allocated but only "
                f"{self.frobnicators - in_use} of {self.frobnicators} are left on {self.node_name}"
            )
        return None
