"""The allocator: built once per scheduling cycle, asked about many nodes.

    cache = SliceCache()                                   # lives as long as the scheduler
    alloc = Allocator(cache.snapshot(slices), classes, AllocatedState.from_claims(allocated))
    results = alloc.allocate(node, [claim], timeout=0.5)   # list[AllocationResult] or None

``allocate`` returns one AllocationResult per claim (same order) or None when the claims do not
fit on the node; then ``last_diagnosis`` says why, per (sub)request (``diagnosis.py``). It
raises ``NodeAllocationError`` when the node has invalid pools and nothing else fits (other
nodes may work), ``InvalidInputError`` for broken input (abort the pod's attempt), and
``AllocationTimeout`` when the time/step budget runs out.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence

from draflow.events.api.resource_v1 import AllocationResult, DeviceClass, ResourceClaim, ResourceSlice
from draflow.events.dra import RequestDiagnosis
from draflow.services.dra import cel
from draflow.services.dra.structured.capacity import CapacityLedger
from draflow.services.dra.structured.counters import CounterLedger
from draflow.services.dra.structured.diagnosis import diagnose
from draflow.services.dra.structured.model import (
    AllocatedState,
    Features,
    InvalidInputError,
    NodeAllocationError,
    NodeLike,
)
from draflow.services.dra.structured.pools import NodePools, Pool
from draflow.services.dra.structured.prepared import PreparedDevice
from draflow.services.dra.structured.requests import RequestData, validate_claims
from draflow.services.dra.structured.results import ShareIDFactory, build_results, seeded_share_ids
from draflow.services.dra.structured.search import Search
from draflow.services.dra.structured.selection import IF_CAPACITY_FITS, usability
from draflow.services.dra.structured.sliceindex import SliceCache, SliceSnapshot

__all__ = ["Allocator"]

ClassLookup = Mapping[str, DeviceClass] | Callable[[str], DeviceClass | None]


class Allocator:
    """See the module docstring. Not thread-safe: use one per thread (they are cheap)."""

    def __init__(
        self,
        slices: SliceSnapshot | Sequence[ResourceSlice],
        classes: ClassLookup,
        state: AllocatedState | None = None,
        *,
        features: Features | None = None,
        share_ids: ShareIDFactory | None = None,
    ) -> None:
        self.snapshot = slices if isinstance(slices, SliceSnapshot) else SliceCache().snapshot(slices)
        if callable(classes):
            self._class = classes
        else:
            mapping = classes
            self._class = mapping.get
        self.state = state if state is not None else AllocatedState()
        self.features = features if features is not None else Features()
        self.share_ids = share_ids if share_ids is not None else seeded_share_ids()
        self._counter_cache: dict[Pool, tuple[dict[tuple[str, str], int], bool]] = {}
        self.last_steps = 0
        # after an allocate() that found no fit: one line per (sub)request saying why
        self.last_diagnosis: list[RequestDiagnosis] = []

    def allocate(
        self,
        node: NodeLike,
        claims: Sequence[ResourceClaim],
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        max_steps: int | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> list[AllocationResult] | None:
        """Allocate all claims together on ``node``; see the module docstring for the outcomes.

        ``timeout`` (seconds) or ``deadline`` (a ``time.monotonic()`` value) bound the wall time,
        CEL selector evaluations included (one that runs past it is AllocationTimeout);
        ``max_steps`` bounds the number of search steps (deterministic, for replays);
        ``cancelled`` is polled with the clock (every 64 steps) and aborts the search when true.
        """
        if self.last_diagnosis:
            self.last_diagnosis = []
        if timeout is not None:
            until = time.monotonic() + timeout
            deadline = until if deadline is None else min(deadline, until)
        features = self.features
        node_name = node.metadata.name
        pools = self.snapshot.pools_for(node_name, node.metadata.labels, features)
        capacity = CapacityLedger(self.state)
        with cel.time_limit(deadline):
            claim_data = validate_claims(
                list(claims), self._class, features, self._all_devices_fn(pools, capacity)
            )
        counters = CounterLedger(self.state, self._counter_cache)
        search = Search(
            claim_data,
            pools,
            self.state,
            counters,
            capacity,
            features,
            deadline,
            max_steps,
            cancelled,
        )
        depth = sum(
            2 * len(cd.slots) + sum(rd.num_devices for s in cd.slots for rd in s.options) for cd in claim_data
        )
        old_limit = sys.getrecursionlimit()
        if depth + 200 > old_limit:
            sys.setrecursionlimit(depth + 200 + len(claim_data) * 4)
        try:
            # CEL selectors run inside the search: a single slow evaluation stops at the deadline too
            with cel.time_limit(deadline):
                found = search.run()
        finally:
            self.last_steps = search.steps
            if sys.getrecursionlimit() != old_limit:
                sys.setrecursionlimit(old_limit)
        if not found:
            self.last_diagnosis = diagnose(
                claim_data, node_name, pools, self.state, counters, capacity, features
            )
            if pools.has_invalid:
                invalid = [(str(p), p.invalid_reason) for p in pools.pools if p.invalid]
                raise NodeAllocationError("invalid resource pools were encountered", invalid)
            return None
        taken = {s[3] for s in self.state.shared}
        return build_results(claim_data, node_name, features, self.share_ids, taken)

    def _all_devices_fn(
        self, pools: NodePools, capacity: CapacityLedger
    ) -> Callable[[RequestData], list[PreparedDevice]]:
        features = self.features

        def all_devices(rd: RequestData) -> list[PreparedDevice]:
            """The fixed device list of an All-mode (sub)request (incomplete/invalid pools refuse)."""
            ref = rd.claim_ref
            out: list[PreparedDevice] = []
            for pool in pools.pools:
                if pool.incomplete:
                    raise InvalidInputError(
                        f"claim {ref}, request {rd.label}: asks for all devices, "
                        f"but resource pool {pool} is currently being updated"
                    )
                if pool.invalid:
                    raise InvalidInputError(
                        f"claim {ref}, request {rd.label}: asks for all devices, "
                        f"but resource pool {pool} is currently invalid"
                    )
                for dev in pool.devices:
                    usable = usability(rd, dev, pools, features, capacity)
                    if not usable or (usable == IF_CAPACITY_FITS and not capacity.fits(dev, rd.capacity)):
                        continue
                    out.append(dev)
            return out

        return all_devices
