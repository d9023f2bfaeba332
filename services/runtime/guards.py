"""Guard messages for claim writes: the takes of an allocation, the releases of a deallocation.

The keys are DRA's (:mod:`draflow.services.dra.guards`), the mechanism is the event store's
(:mod:`draflow.infra.guard`); this joins them for every writer of claims: the scheduler's sagas
take (and release on Unreserve/Reallocate), the object cache (``ApiStore.append``) releases for
the claim controller and for the kubelets' writes the apiserver appends.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from draflow.events.api.resource_v1 import ResourceClaim, ResourceSlice
from draflow.infra.guard import Guard, guard_subject, release, take
from draflow.projections.objects import ObjectIndex
from draflow.services.dra.guards import PoolSlices, allocation_guard_keys, claim_holder

__all__ = ["index_pool_slices", "release_guards", "take_guards"]


POOL_INDEX = "resourceslice-pool"


def _pool_of(obj: object) -> tuple[tuple[str, str], ...]:
    return ((obj.spec.driver, obj.spec.pool.name),) if isinstance(obj, ResourceSlice) else ()


def index_pool_slices(index: ObjectIndex) -> PoolSlices:
    """A pool's slices, looked up in an object index by pool (a secondary index the first call
    adds): every deallocation asks, so a scan of all slices would cost per pod in proportion to
    the cluster's size."""
    index.add_index(POOL_INDEX, "ResourceSlice", _pool_of)

    def pool_slices(driver: str, pool: str) -> Iterator[ResourceSlice]:
        for s in index.by_index(POOL_INDEX, (driver, pool)):
            if isinstance(s, ResourceSlice):
                yield s

    return pool_slices


def release_guards(root: str, claim: ResourceClaim, pool_slices: PoolSlices | None) -> list[Guard]:
    """What deallocating ``claim`` (as it is now) gives back, one release per guard it took."""
    holder, uid = claim_holder(claim)
    keys = allocation_guard_keys(claim.status.allocation, pool_slices)
    return [release(guard_subject(root, scope, key), holder, uid) for scope, key in keys]


def take_guards(root: str, holder: str, uid: str, seen: Iterable[tuple[str, str, int]]) -> list[Guard]:
    """The takes of an allocation: per (scope, key, the guard's last sequence the decision saw)."""
    return [take(guard_subject(root, scope, key), seq, holder, uid) for scope, key, seq in seen]
