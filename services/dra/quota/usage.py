"""ResourceQuota usage of pods and ResourceClaims for DRA devices and extended resources.

Charging follows upstream's evaluators (``pkg/quota/v1/evaluator/core``):

* a **claim**: ``count/resourceclaims.resource.k8s.io`` = 1; per request
  ``<class>.deviceclass.resource.k8s.io/devices`` += count (ExactCount), 32 (All: the worst case,
  AllocationResultsMaxSize), 0 (unknown mode); a ``firstAvailable`` request adds, per class, the
  largest of its subrequests (a maximum, not a sum: only one subrequest is ever allocated — the
  current evaluator takes the true maximum). The same amount is charged to
  ``requests.deviceclass.resource.kubernetes.io/<class>`` and, when the class has an
  ``extendedResourceName``, to ``requests.<that name>``;
* a **pod**: ``count/pods`` = 1 always; unless terminal, ``pods`` = 1 and ``requests.<name>``
  for every extended resource in its PodRequests (init containers counted at their peak).

KEP-5004 asks for the two quotas of one class to stay in step whichever way the devices are
taken. Upstream charges a pod's mapped extended resources only to ``requests.*`` and leaves the
device-class key to the special claim, so a pod on a device-plugin node never shows in
``<class>...devices``. Here (``sync_classes=True``, the default) a pod also charges every other
name of the class its resource maps to (the ``devices`` key and the other ``requests.*`` name),
and the pod's special claim is charged only what exceeds its verified owner's charge — so the
special claim never double-charges, and all keys of one class show the same ``used``.
``sync_classes=False`` gives upstream's exact numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.services.dra.extended.claim import is_extended_resource_claim
from draflow.services.dra.extended.demand import pod_requests
from draflow.services.dra.extended.mapping import ExtendedResourceIndex, parse_timestamp
from draflow.services.dra.extended.names import (
    CLAIM_COUNT_KEY,
    DEVICE_CLASS_PREFIX,
    DEVICES_SUFFIX,
    REQUESTS_PREFIX,
    devices_key,
    implicit_name,
    is_dra_extended_resource_name,
    requests_key,
)
from draflow.services.dra.resourceclaim import is_pod_terminal

__all__ = [
    "ALL_MODE_DEVICES",
    "CLASSIC_CLAIM_COUNT_KEY",
    "PODS_KEY",
    "POD_COUNT_KEY",
    "Usage",
    "add",
    "claim_devices",
    "claim_usage",
    "class_keys",
    "classic_claim_usage",
    "is_tracked",
    "pod_is_charged",
    "pod_usage",
    "subtract",
    "verified_owner",
]

Usage = dict[str, int]

ALL_MODE_DEVICES = 32  # resource/v1 AllocationResultsMaxSize
POD_COUNT_KEY = "count/pods"
# classic (KEP-3063) claims, numeric ones (KEP-4381) among them: counted per group and per class
CLASSIC_CLAIM_COUNT_KEY = "count/resourceclaims.cdi.k8s.io"
CLASSIC_CLASS_SUFFIX = ".resourceclass.cdi.k8s.io/resourceclaims"


def classic_claim_usage(claim: cv.ResourceClaim) -> Usage:
    """A classic claim: one ``count/resourceclaims.cdi.k8s.io`` and one
    ``<class>.resourceclass.cdi.k8s.io/resourceclaims`` (v1alpha2's per-class claim count), the
    same whether a driver or the scheduler (numeric parameters) allocates it."""
    usage = {CLASSIC_CLAIM_COUNT_KEY: 1}
    if claim.spec.resource_class_name:
        usage[f"{claim.spec.resource_class_name}{CLASSIC_CLASS_SUFFIX}"] = 1
    return usage


PODS_KEY = "pods"


def add(into: Usage, more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def subtract(a: Mapping[str, int], b: Mapping[str, int]) -> Usage:
    """``a - b`` key by key over the union (negative deltas kept: an update may free usage)."""
    return {k: a.get(k, 0) - b.get(k, 0) for k in sorted(set(a) | set(b))}


def class_keys(class_name: str, index: ExtendedResourceIndex) -> tuple[str, ...]:
    """Every quota key that measures devices of ``class_name``."""
    keys = [devices_key(class_name), requests_key(implicit_name(class_name))]
    explicit = index.explicit_name_of(class_name)
    if explicit:
        keys.append(requests_key(explicit))
    return tuple(keys)


def _devices(mode: str, count: int) -> int:
    if mode == "ExactCount":
        return count
    if mode == "All":
        return ALL_MODE_DEVICES
    return 0  # unknown (future or downgraded) mode: not charged, as upstream


def claim_devices(claim: ResourceClaim) -> dict[str, int]:
    """Devices per class the claim may take (worst case), keyed by class name."""
    out: dict[str, int] = {}
    for req in claim.spec.devices.requests:
        if req.first_available:
            largest: dict[str, int] = {}
            for sub in req.first_available:
                n = _devices(sub.allocation_mode, sub.count)
                if n > largest.get(sub.device_class_name, -1):
                    largest[sub.device_class_name] = n
            add(out, largest)
        elif req.exactly is not None:
            e = req.exactly
            out[e.device_class_name] = out.get(e.device_class_name, 0) + _devices(e.allocation_mode, e.count)
    return out


def claim_usage(
    claim: ResourceClaim,
    index: ExtendedResourceIndex,
    owner: Pod | None = None,
    *,
    sync_classes: bool = True,
) -> Usage:
    """Quota usage of one claim; ``owner`` = its verified owning pod for the special claim."""
    usage: Usage = {CLAIM_COUNT_KEY: 1}
    extended: Usage = {}
    for class_name, n in claim_devices(claim).items():
        usage[devices_key(class_name)] = usage.get(devices_key(class_name), 0) + n
        extended[requests_key(implicit_name(class_name))] = n
        explicit = index.explicit_name_of(class_name)
        if explicit:
            extended[requests_key(explicit)] = n
    if owner is not None:
        paid = pod_usage(owner, index, sync_classes=sync_classes)
        if sync_classes:
            for key in list(usage):
                if key.endswith(DEVICES_SUFFIX):
                    usage[key] -= min(usage[key], paid.get(key, 0))
        for key, n in extended.items():
            extended[key] = n - paid.get(key, 0)
    for key, n in extended.items():
        if n > 0:
            usage[key] = n
    return {k: v for k, v in sorted(usage.items()) if v > 0 or k == CLAIM_COUNT_KEY}


def verified_owner(
    claim: ResourceClaim, pods: Mapping[tuple[str, str], Pod], claims: Iterable[ResourceClaim]
) -> Pod | None:
    """The pod whose own usage already pays for this special claim, as upstream verifies it.

    The claim must carry the annotation and a v1 Pod controller reference to an existing pod with
    that uid; the pod's ``extendedResourceClaimStatus`` must name this claim, or — before
    PreBind has written it — this claim must be the pod's oldest special claim (creation time,
    then name), so that a leftover duplicate is charged in full.
    """
    if not is_extended_resource_claim(claim):
        return None
    ref = next((r for r in claim.metadata.owner_references if r.controller), None)
    if ref is None or ref.kind != "Pod" or ref.api_version != "v1":
        return None
    pod = pods.get((claim.metadata.namespace, ref.name))
    if pod is None or pod.metadata.uid != ref.uid:
        return None
    status = pod.status.extended_resource_claim_status
    if status is not None:
        return pod if status.resource_claim_name == claim.metadata.name else None
    mine = (parse_timestamp(claim.metadata.creation_timestamp), claim.metadata.name)
    for other in claims:
        if other is claim or other.metadata.namespace != claim.metadata.namespace:
            continue
        if not is_extended_resource_claim(other):
            continue
        if not any(r.controller and r.uid == ref.uid for r in other.metadata.owner_references):
            continue
        if (parse_timestamp(other.metadata.creation_timestamp), other.metadata.name) < mine:
            return None
    return pod


def pod_is_charged(pod: Pod) -> bool:
    """Upstream ``QuotaV1Pod`` minus the grace-period clock: terminal pods stop counting.

    A pod being deleted counts until it is gone (upstream stops once its grace period has run
    out by the wall clock; a replayable reducer cannot read a clock).
    """
    return not is_pod_terminal(pod)


def pod_usage(pod: Pod, index: ExtendedResourceIndex, *, sync_classes: bool = True) -> Usage:
    """Quota usage of one pod (object count, pods, extended-resource requests)."""
    usage: Usage = {POD_COUNT_KEY: 1}
    if not pod_is_charged(pod):
        return usage
    usage[PODS_KEY] = 1
    for name, n in pod_requests(pod).items():
        if not is_dra_extended_resource_name(name):
            continue
        usage[requests_key(name)] = usage.get(requests_key(name), 0) + n
        class_name = index.class_for(name) if sync_classes else None
        if class_name is None or n == 0:
            continue
        for key in class_keys(class_name, index):
            if key != requests_key(name):
                usage[key] = usage.get(key, 0) + n
    return dict(sorted(usage.items()))


def is_tracked(key: str, index: ExtendedResourceIndex) -> bool:
    """Whether this package computes ``used`` for a ``hard`` key (others are left out)."""
    if key in (CLAIM_COUNT_KEY, POD_COUNT_KEY, PODS_KEY, CLASSIC_CLAIM_COUNT_KEY) or key.endswith(
        DEVICES_SUFFIX
    ):
        return True
    if key.endswith(CLASSIC_CLASS_SUFFIX):
        return True
    if key.startswith(REQUESTS_PREFIX):
        name = key[len(REQUESTS_PREFIX) :]
        return is_dra_extended_resource_name(name) or name.startswith(DEVICE_CLASS_PREFIX)
    return False
