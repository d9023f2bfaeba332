"""The example driver's node plugin: prepares GPUs by writing CDI specs, with failure switches.

Behaviour after dra-example-driver's kubelet plugin (``cmd/dra-example-kubeletplugin``): a common
CDI spec (device ``common``: ``KUBERNETES_NODE_NAME``, ``DRA_RESOURCE_DRIVER_NAME``) is written at
start; preparing a claim writes one spec ``k8s.gpu.example.com-gpu_<claim uid>.json`` with a device
``<claim uid>-gpu-<n>`` per allocated GPU (env ``GPU_DEVICE_GPU_<n>_RESOURCE_CLAIM=<uid>``,
``DRA_ADMIN_ACCESS``, then the config's ``GPU_DEVICE_<n>=gpu-<n>`` ...), and answers with the CDI ids
``k8s.gpu.example.com/gpu=common`` and ``k8s.gpu.example.com/gpu=<uid>-gpu-<n>`` per device. The
plugin remembers prepared claims in its own checkpoint, so a repeated call (kubelet retry or
restart) returns the same devices without redoing anything; unprepare removes the spec and is a
no-op for unknown claims.

It reads ``FailureSwitches.prepare_devices`` itself (a device that fails to prepare); the claim- and
call-level switches are applied around any plugin by ``draflow.services.drivers.kubeletplugin.faults``.
"""

from __future__ import annotations

import collections
import json
import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from draflow.events.api.resource_v1 import ResourceClaim
from draflow.services.dra.kubeletplugin import Device, PrepareResult
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers import cdi
from draflow.services.drivers.gpu_example.config import (
    ConfigError,
    config_for_result,
    device_env,
    relevant_configs,
)
from draflow.services.drivers.gpu_example.slices import DRIVER, gpu_devices
from draflow.services.drivers.kubeletplugin.faults import FailureSwitches

__all__ = ["CDI_CLASS", "CDI_VENDOR", "COMMON_DEVICE", "FailureSwitches", "GpuExamplePlugin"]

CDI_VENDOR = f"k8s.{DRIVER}"
CDI_CLASS = "gpu"
COMMON_DEVICE = "common"
PLUGIN_CHECKPOINT = "checkpoint.json"
CALLS_KEPT = 256  # how many of the last prepare/unprepare calls a plugin remembers
_NON_WORD = re.compile(r"[^a-zA-Z0-9]+")


class GpuExamplePlugin:
    """``DRAPlugin`` for ``gpu.example.com`` on one node.

    ``get_claim`` is the driver's view of the API (the kubelet shell passes its projection): the
    plugin reads each claim's allocation itself, as upstream plugins do.
    """

    def __init__(
        self,
        node_name: str,
        cdi_root: Path,
        get_claim: Callable[[ClaimRef], ResourceClaim | None],
        *,
        num_gpus: int = 8,
        state_dir: Path | None = None,
        failures: FailureSwitches | None = None,
    ) -> None:
        self.node_name = node_name
        self.cdi_root = cdi_root
        self.get_claim = get_claim
        self.allocatable = {d.name for d in gpu_devices(node_name, num_gpus)}
        self.state_dir = state_dir
        self.failures = failures or FailureSwitches()
        # the last calls (rpc, claim uids), for tests and debugging; a ring, so a long-running
        # kubelet does not keep one entry per pod it ever ran
        self.calls: collections.deque[tuple[str, tuple[str, ...]]] = collections.deque(maxlen=CALLS_KEPT)
        self._lock = threading.Lock()
        self._prepared: set[str] = self._load()
        common = cdi.CdiDevice(
            name=COMMON_DEVICE,
            env=(f"KUBERNETES_NODE_NAME={node_name}", f"DRA_RESOURCE_DRIVER_NAME={DRIVER}"),
        )
        cdi.write_spec(
            cdi_root,
            cdi.transient_spec_name(CDI_VENDOR, CDI_CLASS, COMMON_DEVICE),
            cdi.build_spec(CDI_VENDOR, CDI_CLASS, [common]),
        )

    @property
    def driver_name(self) -> str:
        return DRIVER

    @property
    def prepared(self) -> frozenset[str]:
        """Uids of the claims currently prepared on this node."""
        return frozenset(self._prepared)

    def health_devices(self) -> list[tuple[str, str]]:
        """``(pool, device)`` of every GPU on this node, for the device health stream."""
        return [(self.node_name, d) for d in sorted(self.allocatable, key=lambda n: (len(n), n))]

    # -- DRAPlugin -----------------------------------------------------------------------------

    def node_prepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        with self._lock:
            self.calls.append(("prepare", tuple(c.uid for c in claims)))
            results = {ref.uid: self._prepare(ref) for ref in claims}
            self._save()
            return results

    def node_unprepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, str | None]:
        with self._lock:
            self.calls.append(("unprepare", tuple(c.uid for c in claims)))
            results: dict[str, str | None] = {}
            for ref in claims:
                cdi.remove_spec(self.cdi_root, self._spec_name(ref.uid))
                self._prepared.discard(ref.uid)
                results[ref.uid] = None
            self._save()
            return results

    # -- internals -----------------------------------------------------------------------------

    def _spec_name(self, claim_uid: str) -> str:
        return cdi.transient_spec_name(CDI_VENDOR, CDI_CLASS, claim_uid)

    def _prepare(self, ref: ClaimRef) -> PrepareResult:
        prefix = f"error preparing devices for claim {ref.uid}"
        claim = self.get_claim(ref)
        if claim is None or claim.metadata.uid != ref.uid:
            return PrepareResult(error=f"{prefix}: ResourceClaim {ref.namespace}/{ref.name} not found")
        allocation = claim.status.allocation
        if allocation is None:
            return PrepareResult(error=f"{prefix}: prepare failed: claim not yet allocated")
        results = [r for r in allocation.devices.results if r.driver == DRIVER]
        for result in results:
            if result.pool != self.node_name or result.device not in self.allocatable:
                return PrepareResult(
                    error=f"{prefix}: prepare failed: requested device is not allocatable: {result.device}"
                )
            if result.device in self.failures.prepare_devices:
                return PrepareResult(error=f"{prefix}: injected failure for device {result.device}")
        try:
            configs = relevant_configs(DRIVER, allocation.devices.config)
        except ConfigError as exc:
            return PrepareResult(error=f"{prefix}: prepare failed: {exc}")
        admin = any(r.admin_access for r in results)
        cdi_devices: list[cdi.CdiDevice] = []
        devices: list[Device] = []
        for result in results:
            device_id = result.device if result.share_id is None else f"{result.device}-{result.share_id}"
            env_key = _NON_WORD.sub("_", result.device).upper()
            env = [
                f"{CDI_CLASS.upper()}_DEVICE_{env_key}_RESOURCE_CLAIM={ref.uid}",
                f"DRA_ADMIN_ACCESS={'true' if admin else 'false'}",
                *device_env(result, config_for_result(configs, result)),
            ]
            name = f"{ref.uid}-{device_id}"
            cdi_devices.append(cdi.CdiDevice(name=name, env=tuple(env)))
            devices.append(
                Device(
                    request_names=(result.request,),
                    pool_name=result.pool,
                    device_name=result.device,
                    cdi_device_ids=(
                        cdi.qualified_name(CDI_VENDOR, CDI_CLASS, COMMON_DEVICE),
                        cdi.qualified_name(CDI_VENDOR, CDI_CLASS, name),
                    ),
                    share_id=result.share_id,
                )
            )
        spec_name = self._spec_name(ref.uid)
        if ref.uid not in self._prepared or cdi.read_spec(self.cdi_root, spec_name) is None:
            cdi.write_spec(self.cdi_root, spec_name, cdi.build_spec(CDI_VENDOR, CDI_CLASS, cdi_devices))
            self._prepared.add(ref.uid)
        return PrepareResult(devices=tuple(devices))

    def _load(self) -> set[str]:
        if self.state_dir is None:
            return set()
        path = self.state_dir / PLUGIN_CHECKPOINT
        if not path.exists():
            return set()
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(uid) for uid in data.get("preparedClaims", [])}

    def _save(self) -> None:
        if self.state_dir is None:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / PLUGIN_CHECKPOINT
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps({"preparedClaims": sorted(self._prepared)}) + "\n", encoding="utf-8")
        os.replace(tmp, path)
