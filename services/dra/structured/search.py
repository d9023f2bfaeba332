"""The depth-first search with backtracking (upstream ``allocateOne`` / ``allocateDevice``).

Order: claims in input order, requests in spec order, a firstAvailable request's subrequests in
list order, then one device slot after the other. Candidates for an ExactCount slot are walked in
the node's search order (pools, slices by name, devices); within one (sub)request the next slot
only looks after the previous pick (combinations, not permutations). The first full solution wins.

A step returns OK, FAIL or EXCEEDED (a claim would need more than 32 results); EXCEEDED makes the
search backtrack aggressively until a firstAvailable request can try a smaller subrequest, and
turns into FAIL at a claim boundary, as upstream.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from draflow.events.quantity import Quantity
from draflow.services.dra.structured.capacity import CapacityLedger
from draflow.services.dra.structured.counters import CounterLedger
from draflow.services.dra.structured.model import (
    RESULTS_MAX_SIZE,
    AllocatedState,
    AllocationTimeout,
    Features,
    InvalidInputError,
)
from draflow.services.dra.structured.pools import NodePools
from draflow.services.dra.structured.prepared import PreparedDevice
from draflow.services.dra.structured.requests import ClaimData, RequestData
from draflow.services.dra.structured.selection import IF_CAPACITY_FITS, taint_blocks, usability

__all__ = ["Search"]

OK: Final = 1
FAIL: Final = 0
EXCEEDED: Final = 2

# How often (in steps) the clock is read for the time budget.
_CLOCK_EVERY: Final = 64


class _Undo:
    """What allocate_device changed, so a failed branch can put it back."""

    __slots__ = ("capacity", "counted", "dev", "marked", "rd")

    def __init__(
        self,
        rd: RequestData,
        dev: PreparedDevice,
        counted: bool,
        marked: bool,
        capacity: dict[str, Quantity] | None,
    ) -> None:
        self.rd = rd
        self.dev = dev
        self.counted = counted
        self.marked = marked
        self.capacity = capacity


class Search:
    """One Allocate call's mutable state and the recursive search over it."""

    def __init__(
        self,
        claims: list[ClaimData],
        pools: NodePools,
        state: AllocatedState,
        counters: CounterLedger,
        capacity: CapacityLedger,
        features: Features,
        deadline: float | None,
        max_steps: int | None,
        cancelled: Callable[[], bool] | None = None,
    ) -> None:
        self.claims = claims
        self.pools = pools
        self.candidates = pools.candidates
        self.state = state
        self.exclusive = state.exclusive
        self.counters = counters
        self.capacity = capacity
        self.features = features
        self.deadline = deadline
        self.max_steps = max_steps
        self.cancelled = cancelled
        self.bounded = deadline is not None or max_steps is not None or cancelled is not None
        self.steps = 0
        # Device -> claim indices taking it exclusively in this search (admin requests included).
        self.taking: dict[tuple[str, str, str], set[int]] = {}

    # -- budget -----------------------------------------------------------------------------------
    def _tick(self) -> None:
        steps = self.steps
        if self.max_steps is not None and steps > self.max_steps:
            raise AllocationTimeout(f"allocation aborted after {self.max_steps} search steps")
        if steps % _CLOCK_EVERY == 0:
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise AllocationTimeout("allocation aborted: time budget exhausted")
            if self.cancelled is not None and self.cancelled():
                raise AllocationTimeout("allocation aborted: cancelled")

    # -- the search ---------------------------------------------------------------------------------
    def run(self) -> bool:
        return self._one(0, 0, 0, 0, False, 0) == OK

    def _one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> int:
        self.steps += 1
        if self.bounded:
            self._tick()
        if ci >= len(self.claims):
            return OK
        claim = self.claims[ci]
        if ri >= len(claim.slots):
            result = self._one(ci + 1, 0, 0, 0, False, 0)
            return FAIL if result == EXCEEDED else result
        slot = claim.slots[ri]
        if slot.subrequests and not in_sub:
            all_exceeded = True
            for option in range(len(slot.options)):
                result = self._one(ci, ri, option, 0, True, 0)
                if result == EXCEEDED:
                    continue
                all_exceeded = False
                if result == OK:
                    slot.selected = option
                    return OK
            return EXCEEDED if all_exceeded else FAIL
        rd = slot.options[si]
        if rd.all_mode and not rd.all_devices:
            return FAIL
        if di >= rd.num_devices:
            return self._one(ci, ri + 1, 0, 0, False, 0)
        if len(claim.results) + rd.num_devices - di > RESULTS_MAX_SIZE:
            rd.exceeded = True
            return EXCEEDED

        rd.tried = True
        if rd.all_mode:
            undo = self._take(claim, rd, rd.all_devices[di], True)
            if undo is None:
                return FAIL
            if di >= rd.reached:
                rd.reached = di + 1
            result = self._one(ci, ri, si, di + 1, in_sub, 0)
            if result != OK:
                self._give_back(claim, undo)
            return result

        candidates = self.candidates
        taking = self.taking
        exclusive = self.exclusive
        admin = rd.admin
        capacity = self.capacity
        for index in range(start, len(candidates)):
            dev = candidates[index]
            holders = taking.get(dev.id)
            if admin:
                if holders and ci in holders:
                    continue
            elif holders or dev.id in exclusive:
                continue
            usable = rd.usable.get(dev)
            if usable is None:
                usable = usability(rd, dev, self.pools, self.features, capacity)
            if not usable:
                continue
            if usable == IF_CAPACITY_FITS and not capacity.fits(dev, rd.capacity):
                continue
            undo = self._take(claim, rd, dev, False)
            if undo is None:
                continue
            if di >= rd.reached:
                rd.reached = di + 1
            result = self._one(ci, ri, si, di + 1, in_sub, index + 1)
            if result == OK:
                return OK
            self._give_back(claim, undo)
            if result == EXCEEDED:
                return EXCEEDED
        return FAIL

    # -- taking one device ---------------------------------------------------------------------------
    def _take(self, claim: ClaimData, rd: RequestData, dev: PreparedDevice, must: bool) -> _Undo | None:
        """Upstream allocateDevice: in use, counters, taints, constraints, then record it."""
        features = self.features
        ci = claim.index
        multi = features.consumable_capacity and dev.allow_multiple
        holders = self.taking.get(dev.id)
        if rd.admin:
            if not multi and holders and ci in holders:
                return None
        elif holders or dev.id in self.exclusive:
            return None
        if dev.consumes and not features.partitionable_devices:
            return None
        counted = False
        if dev.consumes and not (multi and self.capacity.in_use(dev, self.state)):
            pool = self.pools.by_id[dev.slice.pool_id]
            if not self.counters.try_consume(dev, pool):
                return None
            counted = True
        if features.device_taints and dev.taints and taint_blocks(dev, rd.tolerations):
            self._release_counters(dev, counted)
            return None
        added = 0
        for con in rd.constraints:
            if not con.add(dev):
                if must:
                    raise InvalidInputError(
                        f"claim {claim.ref}, request {rd.label}: cannot add device {dev.id} "
                        "because a claim constraint would not be satisfied"
                    )
                misses = rd.misses
                if misses is None:
                    misses = rd.misses = {}
                misses.setdefault(con.label, set()).add(dev.id)
                for undo_con in rd.constraints[:added]:
                    undo_con.remove()
                self._release_counters(dev, counted)
                return None
            added += 1
        consumed: dict[str, Quantity] | None = None
        # Devices that cannot be shared passed a capacity check that cannot change (see usability);
        # upstream re-checks them here with the same outcome.
        if multi:
            if not self.capacity.fits(dev, rd.capacity):
                # Upstream leaves the constraints and marks in place here; we undo them.
                for con in rd.constraints:
                    con.remove()
                self._release_counters(dev, counted)
                return None
            consumed = self.capacity.consumption(dev, rd.capacity)
            self.capacity.take(dev, consumed)
        marked = not multi
        if marked:
            if holders is None:
                self.taking[dev.id] = {ci}
            else:
                holders.add(ci)
        claim.results.append((rd, dev, consumed))
        return _Undo(rd, dev, counted, marked, consumed)

    def _release_counters(self, dev: PreparedDevice, counted: bool) -> None:
        if counted:
            self.counters.release(dev, self.pools.by_id[dev.slice.pool_id])

    def _give_back(self, claim: ClaimData, undo: _Undo) -> None:
        dev = undo.dev
        for con in undo.rd.constraints:
            con.remove()
        if undo.marked:
            holders = self.taking[dev.id]
            holders.discard(claim.index)
            if not holders:
                del self.taking[dev.id]
        if undo.capacity is not None:
            self.capacity.give_back(dev, undo.capacity)
        self._release_counters(dev, undo.counted)
        claim.results.pop()
