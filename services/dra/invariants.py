"""What must hold of the cluster's DRA state at every point of the log (``draflow check``).

Pure: objects in, ``Finding``s out; the CLI folds the log and asks after every event, the kubelet
asks about its own running pods. Two kinds of rule:

* **safety** rules hold after every event: no device in two claims (beyond admin access, shared
  devices and consumable-capacity shares), a Running pod's claims allocated and reserved for it,
  claims prepared on a node only for a pod bound there.
* **settling** rules hold once the controllers have caught up: no reservation for a pod that is
  gone, no allocated claim of a deleted pod, each quota's ``used`` equal to the sum of its objects.
  They are broken for a moment after every delete (until the kubelet or the claim controller acts),
  so they count as violated only when a finding lasts longer than a grace period of log time.

A finding's ``key`` names what it is about; the same key from one event to the next is the same
breakage, so the checker can say which event started it and which ended it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from draflow.events.api.core_v1 import Pod, ResourceQuota
from draflow.events.api.resource_v1 import ResourceClaim, ResourceSlice
from draflow.services.dra.resourceclaim import ClaimNameError, owning_pod, pod_claim_names

__all__ = [
    "CLAIM_OF_DELETED_POD",
    "DEVICE_ONCE",
    "PREPARED_ON_NODE",
    "QUOTA_USAGE",
    "RESERVED_FOR_GONE_POD",
    "RULES",
    "RUNNING_POD_CLAIMS",
    "Finding",
    "Rule",
    "State",
    "claims_of_gone_pods",
    "devices_allocated_twice",
    "evaluate",
    "prepared_mismatches",
    "quota_mismatches",
    "reservations_of_gone_pods",
    "running_pod_claims",
    "shareable_devices",
]

DeviceKey = tuple[str, str, str]  # driver, pool, device
Key = tuple[str, str]  # namespace, name


@dataclass(frozen=True)
class Rule:
    id: str
    text: str  # what must hold, one line
    settles: bool  # broken for a moment by design; violated only when it lasts past the grace


DEVICE_ONCE = Rule(
    "device-once",
    "no device is allocated to two claims (admin access, shared devices and capacity shares aside)",
    False,
)
RUNNING_POD_CLAIMS = Rule(
    "running-pod-claims", "every Running pod's claims are allocated and reserved for it", False
)
PREPARED_ON_NODE = Rule("prepared-on-node", "a node holds prepared claims only for pods bound to it", False)
RESERVED_FOR_GONE_POD = Rule("reserved-for-gone-pod", "no claim stays reserved for a pod that is gone", True)
CLAIM_OF_DELETED_POD = Rule(
    "claim-of-deleted-pod", "no claim generated for a pod stays allocated once the pod is gone", True
)
QUOTA_USAGE = Rule(
    "quota-usage", "each ResourceQuota's status.used equals the sum of its pods' and claims' usage", True
)
RULES: tuple[Rule, ...] = (
    DEVICE_ONCE,
    RUNNING_POD_CLAIMS,
    PREPARED_ON_NODE,
    RESERVED_FOR_GONE_POD,
    CLAIM_OF_DELETED_POD,
    QUOTA_USAGE,
)


@dataclass(frozen=True)
class Finding:
    rule: Rule
    key: tuple[str, ...]  # what it is about: the same key is the same breakage
    message: str
    objects: tuple[tuple[str, str, str], ...] = ()  # (kind, namespace, name) involved, for context


@dataclass
class State:
    """The objects the rules read, keyed (namespace, name); ``prepared`` is node -> pod uid -> the
    claims prepared for it (from ``PodResourcesPrepared``, dropped once the pod's reservations are)."""

    pods: Mapping[Key, Pod] = field(default_factory=dict)
    claims: Mapping[Key, ResourceClaim] = field(default_factory=dict)
    slices: Iterable[ResourceSlice] = ()
    prepared: Mapping[str, Mapping[str, tuple[Key, ...]]] = field(default_factory=dict)
    # quota (namespace, name) -> the status.used its reconciler would write now
    quota_used: Mapping[Key, Mapping[str, object]] = field(default_factory=dict)
    quotas: Mapping[Key, ResourceQuota] = field(default_factory=dict)
    # claim names that are KEP-3063 (classic) claims, which these rules do not read
    classic_claims: frozenset[Key] = frozenset()


def _name(ns: str, name: str) -> str:
    return f"{ns}/{name}"


def shareable_devices(slices: Iterable[ResourceSlice]) -> set[DeviceKey]:
    """Devices whose slice allows several allocations (``allowMultipleAllocations``)."""
    out: set[DeviceKey] = set()
    for s in slices:
        pool = s.spec.pool.name
        for d in s.spec.devices:
            if d.allow_multiple_allocations:
                out.add((s.spec.driver, pool, d.name))
    return out


def devices_allocated_twice(
    claims: Mapping[Key, ResourceClaim], shareable: set[DeviceKey] | frozenset[DeviceKey] = frozenset()
) -> list[Finding]:
    booked: dict[DeviceKey, Key] = {}
    out: list[Finding] = []
    for key in sorted(claims):
        alloc = claims[key].status.allocation
        for r in alloc.devices.results if alloc is not None else ():
            dev = (r.driver, r.pool, r.device)
            if r.admin_access or r.share_id or dev in shareable:
                continue
            other = booked.setdefault(dev, key)
            if other != key:
                out.append(
                    Finding(
                        DEVICE_ONCE,
                        ("/".join(dev),),
                        f"device {'/'.join(dev)} is allocated to claim {_name(*other)} and to claim "
                        f"{_name(*key)}",
                        (("ResourceClaim", *other), ("ResourceClaim", *key)),
                    )
                )
    return out


def _is_running(pod: Pod) -> bool:
    return pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None


def running_pod_claims(
    pods: Mapping[Key, Pod], claims: Mapping[Key, ResourceClaim], classic: frozenset[Key] = frozenset()
) -> list[Finding]:
    out: list[Finding] = []
    for key in sorted(pods):
        pod = pods[key]
        if _is_running(pod):
            out += pod_claim_findings(pod, claims, classic)
    return out


def pod_claim_findings(
    pod: Pod, claims: Mapping[Key, ResourceClaim], classic: frozenset[Key] = frozenset()
) -> list[Finding]:
    """Why a Running pod does not hold its claims (empty: it does): the kubelet's live check too."""
    ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
    where = f"pod {_name(ns, name)} is Running on {pod.spec.node_name or '(no node)'}"
    try:
        names = [n for n, _ in pod_claim_names(pod)]
    except ClaimNameError as exc:
        return [Finding(RUNNING_POD_CLAIMS, (uid, ""), f"{where} but {exc}", (("Pod", ns, name),))]
    out: list[Finding] = []
    for claim_name in names:
        if (ns, claim_name) in classic:
            continue
        claim = claims.get((ns, claim_name))
        objects = (("Pod", ns, name), ("ResourceClaim", ns, claim_name))
        if claim is None:
            why = "does not exist"
        elif claim.status.allocation is None:
            why = "is not allocated"
        elif not any(r.uid == uid for r in claim.status.reserved_for):
            why = "is not reserved for it"
        else:
            continue
        out.append(
            Finding(
                RUNNING_POD_CLAIMS, (uid, claim_name), f"{where} but its claim {claim_name} {why}", objects
            )
        )
    return out


def prepared_mismatches(
    pods: Mapping[Key, Pod], prepared: Mapping[str, Mapping[str, tuple[Key, ...]]]
) -> list[Finding]:
    by_uid = {p.metadata.uid: p for p in pods.values()}
    out: list[Finding] = []
    for node in sorted(prepared):
        for uid in sorted(prepared[node]):
            pod = by_uid.get(uid)
            if pod is None or pod.spec.node_name == node:
                continue  # gone: the kubelet unprepares what it can no longer see
            ns, name = pod.metadata.namespace, pod.metadata.name
            bound = f"bound to {pod.spec.node_name}" if pod.spec.node_name else "not bound to any node"
            claims = ", ".join(n for _, n in prepared[node][uid])
            out.append(
                Finding(
                    PREPARED_ON_NODE,
                    (node, uid),
                    f"node {node} holds claims {claims} prepared for pod {_name(ns, name)}, which is {bound}",
                    (("Pod", ns, name), *(("ResourceClaim", cns, n) for cns, n in prepared[node][uid])),
                )
            )
    return out


def reservations_of_gone_pods(pods: Mapping[Key, Pod], claims: Mapping[Key, ResourceClaim]) -> list[Finding]:
    uids = {p.metadata.uid for p in pods.values()}
    out: list[Finding] = []
    for key in sorted(claims):
        for ref in claims[key].status.reserved_for:
            if ref.resource in ("", "pods") and ref.uid not in uids:
                out.append(
                    Finding(
                        RESERVED_FOR_GONE_POD,
                        (*key, ref.uid),
                        f"claim {_name(*key)} is reserved for pod {ref.name} (uid {ref.uid}), which is gone",
                        (("ResourceClaim", *key), ("Pod", key[0], ref.name)),
                    )
                )
    return out


def claims_of_gone_pods(pods: Mapping[Key, Pod], claims: Mapping[Key, ResourceClaim]) -> list[Finding]:
    uids = {p.metadata.uid for p in pods.values()}
    out: list[Finding] = []
    for key in sorted(claims):
        claim = claims[key]
        owner = owning_pod(claim)
        if owner is None or owner.uid in uids or claim.status.allocation is None:
            continue
        out.append(
            Finding(
                CLAIM_OF_DELETED_POD,
                key,
                f"claim {_name(*key)} is still allocated, but pod {owner.name} (uid {owner.uid}) it was "
                "generated for is gone",
                (("ResourceClaim", *key), ("Pod", key[0], owner.name)),
            )
        )
    return out


def quota_mismatches(
    quotas: Mapping[Key, ResourceQuota], expected: Mapping[Key, Mapping[str, object]]
) -> list[Finding]:
    out: list[Finding] = []
    for key in sorted(quotas):
        want = expected.get(key)
        used = dict(quotas[key].status.used)
        if want is None or used == dict(want):
            continue
        diff = sorted(k for k in set(used) | set(want) if used.get(k) != want.get(k))
        what = ", ".join(f"{k}: {used.get(k, '-')} (sum {want.get(k, '-')})" for k in diff)
        out.append(
            Finding(
                QUOTA_USAGE,
                key,
                f"ResourceQuota {_name(*key)} reports used {what}",
                (("ResourceQuota", *key),),
            )
        )
    return out


def evaluate(state: State) -> list[Finding]:
    """Every finding in ``state``, rule by rule."""
    return [
        *devices_allocated_twice(state.claims, shareable_devices(state.slices)),
        *running_pod_claims(state.pods, state.claims, state.classic_claims),
        *prepared_mismatches(state.pods, state.prepared),
        *reservations_of_gone_pods(state.pods, state.claims),
        *claims_of_gone_pods(state.pods, state.claims),
        *quota_mismatches(state.quotas, state.quota_used),
    ]
