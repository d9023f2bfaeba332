"""The demo, as code: which dra-example-driver examples run, and what each pod must end up with.

Shared by the end-to-end test and ``docs/demo.md``'s walkthrough. ``EXAMPLES`` are the upstream
demo files (``examples/dra-example-driver/``) that the ``gpu`` profile with 8 GPUs per node can run;
the others need another driver profile (partitionable devices, net capacity, native CPU,
multiple allocations per device), PodGroups or DeviceTaintRules, see ``docs/demo.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from tests.paths import ROOT

EXAMPLES_DIR = ROOT / "examples" / "dra-example-driver"
EXAMPLES = (
    "basic-resourceclaimtemplate--basic-resourceclaimtemplate.yaml",
    "basic-resourceclaim-opaque-config--basic-resourceclaim-opaque-config.yaml",
    "basic-shared-claim-across-pods--basic-shared-claim-across-pods.yaml",
    "cel-selector--cel-selector.yaml",
    "initcontainer-shared-gpu--initcontainer-shared-gpu.yaml",
    "prioritized-alternatives--prioritized-alternatives.yaml",
    "admin-access--admin-access.yaml",
)
WORKLOADS = ROOT / "examples" / "workloads" / "gpu-workloads.yaml"
WORKLOADS_NS = "gpu-workloads"
NODES = ("node-1", "node-2", "node-3", "node-4")
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Allocated:
    """One allocated device as a claim's status shows it."""

    claim: str  # namespace/name
    request: str
    node: str
    device: str
    admin: bool


def allocated(claims: Iterable[ResourceClaim]) -> list[Allocated]:
    out = []
    for c in claims:
        if c.status.allocation is None:
            continue
        for r in c.status.allocation.devices.results:
            out.append(
                Allocated(
                    claim=f"{c.metadata.namespace}/{c.metadata.name}",
                    request=r.request,
                    node=r.pool,
                    device=r.device,
                    admin=bool(r.admin_access),
                )
            )
    return out


def claims_of(pod: Pod, claims: dict[tuple[str, str], ResourceClaim]) -> list[ResourceClaim]:
    """The claims a pod uses (template-generated ones through its recorded statuses)."""
    ns = pod.metadata.namespace
    names = []
    for pc in pod.spec.resource_claims:
        if pc.resource_claim_name:
            names.append(pc.resource_claim_name)
        else:
            names += [
                s.resource_claim_name
                for s in pod.status.resource_claim_statuses
                if s.name == pc.name and s.resource_claim_name
            ]
    return [claims[(ns, n)] for n in names if (ns, n) in claims]


def check_intended(
    pods: dict[tuple[str, str], Pod], claims: dict[tuple[str, str], ResourceClaim]
) -> list[str]:
    """What differs from what each example's author intended (empty list: all as intended)."""
    problems: list[str] = []

    def devices(ns: str, pod: str) -> list[Allocated]:
        return allocated(claims_of(pods[(ns, pod)], claims))

    def expect(cond: bool, what: str) -> None:
        if not cond:
            problems.append(what)

    for key, pod in pods.items():
        expect(pod.status.phase == "Running", f"{key}: phase {pod.status.phase!r}")
        for d in devices(*key):
            expect(
                d.node == pod.spec.node_name,
                f"{key}: device {d.device} on {d.node}, pod on {pod.spec.node_name}",
            )
    ns = "basic-resourceclaimtemplate"
    a, b = devices(ns, "pod0"), devices(ns, "pod1")
    expect(len(a) == len(b) == 1 and (a[0].node, a[0].device) != (b[0].node, b[0].device), f"{ns}: {a} {b}")
    ns = "basic-resourceclaim-opaque-config"
    a = devices(ns, "pod0")
    expect(
        sorted(d.request for d in a) == ["sp-gpu", "ts-gpu"] and len({d.device for d in a}) == 2, f"{ns}: {a}"
    )
    ns = "basic-shared-claim-across-pods"
    a, b = devices(ns, "pod0"), devices(ns, "pod1")
    expect(len(a) == 1 and a == b, f"{ns}: shared claim {a} vs {b}")
    shared = claims.get((ns, "single-gpu"))
    expect(
        shared is not None and len(shared.status.reserved_for) == 2, f"{ns}: reservedFor of the shared claim"
    )
    ns = "cel-selector"
    expect(len(devices(ns, "pod0")) == 1, f"{ns}: {devices(ns, 'pod0')}")
    ns = "initcontainer-shared-gpu"
    expect(len(devices(ns, "pod0")) == 1, f"{ns}: {devices(ns, 'pod0')}")
    ns = "prioritized-alternatives"
    a, b = devices(ns, "pod0"), devices(ns, "pod1")
    expect([d.request for d in a] == ["gpu/older-gpu"], f"{ns}: pod0 {a}")
    expect([d.request for d in b] == ["gpu/latest-gpu"], f"{ns}: pod1 {b}")
    ns = "admin-access"
    a = devices(ns, "pod0")
    expect(len(a) == GPUS_PER_NODE and all(d.admin for d in a), f"{ns}: {a}")
    # no device is given out twice, except to admin access (which does not consume it)
    used = [(d.node, d.device) for d in allocated(claims.values()) if not d.admin]
    expect(len(used) == len(set(used)), f"a device allocated twice: {sorted(used)}")
    return problems


def check_workloads(
    pods: dict[tuple[str, str], Pod], claims: dict[tuple[str, str], ResourceClaim], job: Any
) -> list[str]:
    """examples/workloads: 3 trainer pods Running on a GPU each; the Job Complete, its claims gone."""
    problems = []
    trainers = [
        p for (ns, _), p in pods.items() if ns == WORKLOADS_NS and p.metadata.labels.get("app") == "trainer"
    ]
    running = [p for p in trainers if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
    if len(running) != 3:
        problems.append(f"trainer pods: {[(p.metadata.name, p.status.phase) for p in trainers]}")
    for p in running:
        if len(allocated(claims_of(p, claims))) != 1:
            problems.append(f"trainer {p.metadata.name}: {allocated(claims_of(p, claims))}")
    conditions = {c.get("type"): c.get("status") for c in (job.status.get("conditions") or [])} if job else {}
    if conditions.get("Complete") != "True" or job.status.get("succeeded") != 2:
        problems.append(f"job: {job.status if job else None}")
    job_pods = [
        p for (ns, _), p in pods.items() if ns == WORKLOADS_NS and p.metadata.name.startswith("benchmark-")
    ]
    for p in job_pods:
        if p.status.phase != "Succeeded" or claims_of(p, claims):
            problems.append(f"job pod {p.metadata.name}: {p.status.phase}, claims {claims_of(p, claims)}")
    return problems


def cdi_ids(events: list[Any]) -> dict[str, tuple[str, ...]]:
    """Container -> CDI ids from a pod's ``PodResourcesPrepared`` (its last one)."""
    from draflow.events.dra import PodResourcesPrepared

    out: dict[str, tuple[str, ...]] = {}
    for ev in events:
        if isinstance(ev, PodResourcesPrepared):
            out = {c.container: c.cdi_ids for c in ev.containers}
    return out
