"""The assume cache: decisions the scheduler took that the log does not show yet.

Reserve puts the pod on its node and the claim allocations it computed here, so the next cycle
(which may start before the PodScheduling saga has appended anything) counts those devices and
resources as taken: concurrent decisions never double-book. Entries go away when the written
objects come back (a claim with ``status.allocation``, a pod with ``spec.nodeName``) or when the
saga compensates (Unreserve).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import AllocationResult

__all__ = ["AssumeCache", "AssumedPod", "ClaimKey", "PendingAllocation", "pod_key"]

ClaimKey = tuple[str, str]  # (namespace, name)


def pod_key(pod: Pod) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


@dataclass(frozen=True, slots=True)
class PendingAllocation:
    """An allocation decided by Reserve and not yet visible in the claim object."""

    pod_key: str
    claim_uid: str
    node_name: str
    allocation: AllocationResult


@dataclass(slots=True)
class AssumedPod:
    pod: Pod
    node_name: str
    claims: list[ClaimKey] = field(default_factory=list)
    placed: bool = False  # the pod's requests are counted on the node


class AssumeCache:
    """Pending allocations by claim and assumed pods by ``namespace/name``."""

    __slots__ = ("claims", "pods")

    def __init__(self) -> None:
        self.claims: dict[ClaimKey, PendingAllocation] = {}
        self.pods: dict[str, AssumedPod] = {}

    def __len__(self) -> int:
        return len(self.pods)
