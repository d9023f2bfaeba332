"""Classic DRA and quota through real processes, as the Procfile runs them: the quota-reconciler
and driver-controller start before the apiserver (and wait for it), an Immediate FPGA claim
applied through the apiserver is allocated by the driver-controller, quota status is written,
the claim's deletion runs the teardown, and every process stops cleanly on SIGTERM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from infra.config import Settings
from infra.eventstore import EventStore
from services.runtime.client import ApiClient
from services.runtime.protocol import StatusError
from tests.classic.cluster import eventually
from tests.e2e.procs import Proc

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "classic"
QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "claims", "namespace": "default"},
    "spec": {"hard": {"count/resourceclaims.resource.k8s.io": 5}},
}


async def test_classic_claim_and_quota_through_processes(settings: Settings, event_store: EventStore) -> None:
    """(``event_store`` creates the stream first and deletes it afterwards.)"""
    procs = [
        Proc(settings, "services.quota_reconciler"),
        Proc(settings, "services.driver_controller"),
    ]
    procs[0].expect("quota-reconciler: following")
    procs[1].expect("driver-controller: drivers")
    procs.append(Proc(settings, "services.apiserver"))
    api = await ApiClient.connect(settings, actor="test", timeout_s=10.0)
    try:
        fpga = yaml.safe_load((EXAMPLES / "fpga-resourceclass.yaml").read_text())
        claim = next(yaml.safe_load_all((EXAMPLES / "fpga-immediate-claim.yaml").read_text()))
        results = await api.apply([QUOTA, fpga, claim])
        assert [r.error for r in results] == [None, None, None], results

        async def allocated() -> Any:
            obj = await api.get("resourceclaims.cdi.k8s.io", "aes-accelerator", namespace="default")
            return obj if obj["status"].get("phase") == "Allocated" else None

        obj = await eventually(allocated)
        assert obj["status"]["driverName"] == "fpga.example.com"
        assert obj["metadata"]["finalizers"] == ["fpga.example.com/deletion-protection"]

        async def quota_used() -> Any:
            quota = await api.get("ResourceQuota", "claims", namespace="default")
            return (quota.get("status") or {}).get("used")

        assert await eventually(quota_used) == {"count/resourceclaims.resource.k8s.io": "0"}

        await api.delete([("resourceclaims.cdi.k8s.io", "default", "aes-accelerator")])

        async def gone() -> bool:
            try:
                await api.get("resourceclaims.cdi.k8s.io", "aes-accelerator", namespace="default")
            except StatusError as exc:
                return exc.status.code == 404
            return False

        await eventually(gone)
    finally:
        await api.close()
        codes = [p.terminate() for p in procs]
    assert codes == [0, 0, 0], [p.stderr[-20:] for p in procs]
