"""Structured-parameters device allocation (Kubernetes DRA, resource.k8s.io/v1), as kube-scheduler does it.

Public API (what the scheduler uses)::

    from services.dra.structured import Allocator, AllocatedState, SliceCache

    cache = SliceCache()                              # long-lived; prepares each slice object once
    snapshot = cache.snapshot(slices)                 # slices with DeviceTaintRules applied
    state = AllocatedState.from_claims(allocated)     # every allocated / in-flight claim
    allocator = Allocator(snapshot, classes, state)   # once per scheduling cycle
    results = allocator.allocate(node, claims, timeout=0.2)

``results`` is ``list[AllocationResult]`` (one per claim, ready for ``status.allocation``) or
None (does not fit this node). Errors: ``NodeAllocationError`` (node-scoped: invalid pools),
``InvalidInputError`` (broken input: abort the pod's attempt), ``AllocationTimeout`` (budget).
All are ``AllocationError``. See docs/allocator.md for semantics and deviations from upstream.
"""

from services.dra.structured.allocator import Allocator
from services.dra.structured.model import (
    RESULTS_MAX_SIZE,
    AllocatedState,
    AllocationError,
    AllocationTimeout,
    DeviceID,
    Features,
    InvalidInputError,
    NodeAllocationError,
    SharedDeviceID,
)
from services.dra.structured.results import ShareIDFactory, seeded_share_ids
from services.dra.structured.sliceindex import SliceCache, SliceSnapshot
from services.dra.structured.taintrules import apply_taint_rules

__all__ = [
    "RESULTS_MAX_SIZE",
    "AllocatedState",
    "AllocationError",
    "AllocationTimeout",
    "Allocator",
    "DeviceID",
    "Features",
    "InvalidInputError",
    "NodeAllocationError",
    "ShareIDFactory",
    "SharedDeviceID",
    "SliceCache",
    "SliceSnapshot",
    "apply_taint_rules",
    "seeded_share_ids",
]
