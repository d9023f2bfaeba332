"""Support for ``bench.scheduling``: the manifests of scheduler_perf's DRA shape (one DeviceClass, a
template, nodes with one slice each, pods with one template claim) in its three claim variants,
and the log tracker that timestamps what the bench measures, per pod, from JetStream's storage
times."""

from __future__ import annotations

from typing import Any

from bench.harness import LogFollower, stored_at, template_pod, until
from draflow.events.codec import HDR_TYPE, decode
from draflow.infra.eventstore import EventStore, RawRecord
from draflow.services.runtime.client import ApiClient

__all__ = [
    "DRIVER",
    "NS",
    "Tracker",
    "apply_all",
    "claim_manifest",
    "cluster_manifests",
    "devices_per_pod",
    "pod_manifest",
    "template_manifest",
]

DRIVER = "gpu.example.com"
NS = "default"  # the measured pods and their claims
# upstream's selector_* case: every device matches, but the allocator evaluates the expression
CEL_SELECTOR = (
    f"device.capacity['{DRIVER}'].memory.compareTo(quantity('1Gi')) == 0 && "
    f"device.attributes['{DRIVER}'].family == 'GPU'"
)


def devices_per_pod(mode: str) -> int:
    """Devices one pod's claim takes: two for ``match`` (upstream's match_* case), else one."""
    return 2 if mode == "match" else 1


def template_manifest(mode: str) -> dict[str, Any]:
    """The pods' ResourceClaimTemplate: one device (``plain``), one device with a CEL selector
    (``cel``), two devices with a matchAttribute constraint (``match``)."""
    exactly: dict[str, Any] = {"deviceClassName": "gpu"}
    spec: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if mode == "cel":
        exactly["selectors"] = [{"cel": {"expression": CEL_SELECTOR}}]
    elif mode == "match":
        exactly["count"] = 2
        spec["constraints"] = [{"requests": ["gpu"], "matchAttribute": f"{DRIVER}/slice"}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-template", "namespace": NS},
        "spec": {"spec": {"devices": spec}},
    }


def pod_manifest(name: str) -> dict[str, Any]:
    return template_pod(name, NS, "gpu-template")


def node_name(i: int) -> str:
    return f"node-{i:04d}"


def cluster_manifests(nodes: int, devices: int, mode: str = "plain") -> list[dict[str, Any]]:
    """DeviceClass, the template, ``nodes`` Nodes and one slice each with ``devices`` devices.
    Every device carries the attributes and capacity the ``cel`` and ``match`` variants use."""
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
        template_manifest(mode),
    ]
    for i in range(nodes):
        node = node_name(i)
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
                        {
                            "name": f"gpu-{d}",
                            "attributes": {
                                "index": {"int": d},
                                "family": {"string": "GPU"},
                                "slice": {"string": node},
                            },
                            "capacity": {"memory": {"value": "1Gi"}},
                        }
                        for d in range(devices)
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


def claim_manifest(pod: str, uid: str, mode: str = "plain") -> dict[str, Any]:
    """The claim the claim controller would generate for ``pod`` from the template
    (``--claims bench``)."""
    owner = {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid, "controller": True}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{pod}-gpu",
            "namespace": NS,
            "ownerReferences": [owner],
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
        },
        "spec": template_manifest(mode)["spec"]["spec"],
    }


Mark = tuple[int, float, str]  # (stream sequence, storage time, label)


class Tracker(LogFollower):
    """Follows the log and timestamps, per measured pod (namespace ``default``), every event that
    belongs to its path: its own events, its claims' (known by their owner), its PodScheduling
    saga's (known by the saga's input) and the guard messages that saga appended (known by their
    message id), and the Kubernetes Events about it. Times are storage times (seconds)."""

    def __init__(self, store: EventStore) -> None:
        super().__init__(store)
        self.store = store
        self.created: dict[str, float] = {}  # pod uid -> PodApplied time
        self.uid_of: dict[str, str] = {}  # pod name -> uid
        self.allocated: dict[str, float] = {}  # pod uid -> ClaimAllocated time
        self.bound: dict[str, float] = {}  # pod name -> PodBound time
        self.statuses: set[str] = set()  # pods with their claim recorded
        self.deallocated: set[str] = set()  # pod uids whose claim was deallocated
        self.saga_took: list[float] = []  # PodScheduling saga durations (s)
        self.marks: dict[str, list[Mark]] = {}  # pod uid -> its events in log order
        self._claim_pod: dict[str, str] = {}  # claim name -> owning pod uid
        self._saga_pod: dict[str, str] = {}  # saga id -> pod uid
        self._saga_started: dict[str, float] = {}
        # pod uid -> the messages of its failed scheduling attempts (why a pod took an extra cycle)
        self.unschedulable: dict[str, list[str]] = {}

    def _mark(self, uid: str | None, rec: RawRecord, label: str) -> float:
        ts = stored_at(rec)
        if uid:
            self.marks.setdefault(uid, []).append((rec.seq, ts, label))
        return ts

    def apply(self, rec: RawRecord) -> None:
        t = rec.header(HDR_TYPE) or ""
        parts = rec.subject.split(".", 4)
        if len(parts) < 5:
            return
        kind, ns, name = parts[2], parts[3], parts[4]
        if kind == "Pod" and ns == NS:
            self._pod(rec, t, name)
        elif kind == "ResourceClaim" and ns == NS:
            self._claim(rec, t, name)
        elif kind == "Saga":
            self._saga(rec, t, name)
        elif kind == "Guard":
            msg_id = rec.header("Nats-Msg-Id") or ""
            if msg_id.startswith("saga:"):
                self._mark(self._saga_pod.get(msg_id.split(":", 2)[1]), rec, t)
        elif t == "KubeEventRecorded" and ns == NS:
            event = decode(rec.data, rec.seq).data.event  # type: ignore[attr-defined]
            involved = event.involved_object
            if involved.kind == "Pod":
                self._mark(involved.uid, rec, f"{t} {event.reason}")

    def _pod(self, rec: RawRecord, t: str, name: str) -> None:
        if t == "PodApplied" and name not in self.uid_of:
            uid = decode(rec.data, rec.seq).data.object.metadata.uid  # type: ignore[attr-defined]
            self.uid_of[name] = uid
            self.created[uid] = self._mark(uid, rec, t)
            return
        uid = self.uid_of.get(name)
        ts = self._mark(uid, rec, t)
        if t == "PodUnschedulable" and uid:
            message = decode(rec.data, rec.seq).data.message  # type: ignore[attr-defined]
            self.unschedulable.setdefault(uid, []).append(message)
        elif t == "PodBound":
            self.bound.setdefault(name, ts)
        elif t == "PodClaimStatusesRecorded":
            self.statuses.add(name)

    def _claim(self, rec: RawRecord, t: str, name: str) -> None:
        if t == "ResourceClaimApplied" and name not in self._claim_pod:
            claim = decode(rec.data, rec.seq).data.object  # type: ignore[attr-defined]
            owners = [o.uid for o in claim.metadata.owner_references if o.kind == "Pod"]
            if owners:
                self._claim_pod[name] = owners[0]
        uid = self._claim_pod.get(name)
        ts = self._mark(uid, rec, t)
        if uid is None:
            return
        if t == "ClaimAllocated":
            self.allocated.setdefault(uid, ts)
        elif t == "ClaimDeallocated":
            self.deallocated.add(uid)

    def _saga(self, rec: RawRecord, t: str, saga_id: str) -> None:
        if t == "SagaStarted":
            data = decode(rec.data, rec.seq).data
            if getattr(data, "saga_type", "") != "PodScheduling":
                return
            pod_uid = str(data.input.get("uid", ""))  # type: ignore[attr-defined]
            self._saga_pod[saga_id] = pod_uid
            self._saga_started[saga_id] = self._mark(pod_uid, rec, t)
            return
        uid = self._saga_pod.get(saga_id)
        if uid is None:
            return
        label = t
        if t.startswith("SagaStep"):
            label = f"{t} {decode(rec.data, rec.seq).data.step}"  # type: ignore[attr-defined]
        ts = self._mark(uid, rec, label)
        if t in ("SagaCompleted", "SagaCompensated") and saga_id in self._saga_started:
            self.saga_took.append(ts - self._saga_started.pop(saga_id))

    async def until(self, check: Any, timeout_s: float, what: str) -> None:
        await until(check, self.changed, timeout_s, what)
