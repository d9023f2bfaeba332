"""Support for ``bench.scheduling``: the log tracker that timestamps what the bench measures and
the manifests of scheduler_perf's DRA shape (one DeviceClass, a template, nodes with one slice each,
pods with one template claim)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from typing import Any

from events.codec import HDR_TYPE, decode
from events.dra import ClaimAllocated
from infra.eventstore import EventStore, RawRecord
from services.runtime.client import ApiClient
from services.runtime.tail import Tail

__all__ = ["DRIVER", "Tracker", "apply_all", "claim_manifest", "cluster_manifests", "pod_manifest"]

DRIVER = "gpu.example.com"


def _stored_at(rec: RawRecord) -> float:
    """When JetStream stored the message (epoch seconds)."""
    if rec.ts_ns:
        return rec.ts_ns / 1e9
    t = rec.time
    return t.timestamp() if t is not None else time.time()


class Tracker:
    """Follows the log and timestamps what the bench measures (storage times, seconds)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.created: dict[str, float] = {}  # pod uid -> PodApplied time
        self.uid_of: dict[str, str] = {}  # pod name -> uid
        self.allocated: dict[str, float] = {}  # pod uid -> ClaimAllocated time
        self.bound: dict[str, float] = {}  # pod name -> PodBound time
        self.statuses: set[str] = set()  # pods with their claim recorded
        self.deallocated = 0
        self.saga_started: dict[str, float] = {}
        self.saga_took: list[float] = []  # PodScheduling saga durations (s)
        self.changed = asyncio.Event()
        self._prefix = f"{store.root}.ev."
        self._tail = Tail(store, f"{store.root}.ev.>", 1, idle_poll_s=0.2)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        await self._tail.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self) -> None:
        async for records in self._tail.batches():
            for rec in records:
                try:
                    self._apply(rec)
                except Exception as exc:  # keep measuring; say what could not be read
                    print(f"tracker: event {rec.seq} on {rec.subject}: {exc!r}", file=sys.stderr)
            self.changed.set()

    def _apply(self, rec: RawRecord) -> None:
        t = rec.header(HDR_TYPE) or ""
        if t in ("SagaStarted", "SagaCompleted", "SagaCompensated"):
            ts = _stored_at(rec)
            if t == "SagaStarted":
                self.saga_started[rec.subject] = ts
            elif rec.subject in self.saga_started:
                self.saga_took.append(ts - self.saga_started.pop(rec.subject))
            return
        if t not in (
            "PodApplied",
            "ClaimAllocated",
            "PodBound",
            "PodClaimStatusesRecorded",
            "ClaimDeallocated",
        ):
            return
        ts = _stored_at(rec)
        name = rec.subject.rsplit(".", 1)[-1]
        if t == "PodBound":
            self.bound.setdefault(name, ts)
        elif t == "PodClaimStatusesRecorded":
            self.statuses.add(name)
        elif t == "ClaimDeallocated":
            self.deallocated += 1
        elif t == "PodApplied":
            env = decode(rec.data, rec.seq)
            uid = env.data.object.metadata.uid  # type: ignore[attr-defined]
            if name not in self.uid_of:
                self.uid_of[name] = uid
                self.created[uid] = ts
        else:
            env = decode(rec.data, rec.seq)
            assert isinstance(env.data, ClaimAllocated)
            self.allocated.setdefault(env.data.pod_uid, ts)

    async def until(self, check: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"timed out waiting for {what}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))


def pod_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}],
        },
    }


def cluster_manifests(nodes: int, devices: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpu-template", "namespace": "default"},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}
            },
        },
    ]
    for i in range(nodes):
        node = f"node-{i:04d}"
        alloc = {"cpu": "32", "memory": "128Gi", "pods": "110"}
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
                "status": {"allocatable": alloc, "capacity": alloc},
            }
        )
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-{DRIVER}"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": f"gpu-{d}", "attributes": {"index": {"int": d}}} for d in range(devices)
                    ],
                },
            }
        )
    return out


async def apply_all(api: ApiClient, manifests: list[dict[str, Any]]) -> None:
    results = await api.apply(manifests, create_only=True)
    bad = [r.error for r in results if r.error is not None]
    if bad:
        raise RuntimeError(f"creating objects failed: {bad[0]}")


def claim_manifest(pod: str, uid: str) -> dict[str, Any]:
    owner = {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid, "controller": True}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{pod}-gpu",
            "namespace": "default",
            "ownerReferences": [owner],
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
