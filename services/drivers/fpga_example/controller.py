"""fpga.example.com control-plane plugin: FPGA pool, reachability by node label, programming.

Books are in memory and rebuilt from allocated claims (``observe``): each allocation's attributes
name the FPGA, so deallocation works without the ResourceClass. Every decision depends only on
what was observed and asked before (first free FPGA by name that has enough memory), so the
same history gives the same allocations.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from events.api import classic_v1alpha1 as cv
from events.api import core_v1 as c1
from events.api.base import ApiStruct
from events.api.meta import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from events.quantity import Quantity
from services.dra.classic import claims as cl
from services.dra.classic.plugin import (
    AllocateOutcome,
    AllocationResult,
    ClaimAllocation,
    DeallocateOutcome,
    Failure,
    Freed,
    InProgress,
    Parameters,
)
from services.drivers.fpga_example.params import FpgaParameters, parse_parameters

__all__ = ["DEFAULT_POOL", "DRIVER_NAME", "FABRIC_LABEL", "Fpga", "FpgaController", "create_plugin"]

DRIVER_NAME = "fpga.example.com"
FABRIC_LABEL = "fpga.example.com/fabric"


class Fpga(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    memory: str = "8Gi"


DEFAULT_POOL = (
    Fpga(name="fpga-0", memory="8Gi"),
    Fpga(name="fpga-1", memory="8Gi"),
    Fpga(name="fpga-2", memory="16Gi"),
)


class _Programming(msgspec.Struct, kw_only=True):
    fpga: str
    remaining: int
    ready_at: float = 0.0  # clock value when the programming delay is over


class FpgaController:
    """The ControllerPlugin of fpga.example.com.

    Programming an FPGA is simulated: ``allocate`` answers ``InProgress`` until both
    ``programming_steps`` calls were made and ``programming_delay_s`` seconds of ``clock`` have
    passed since the FPGA was picked. The delay only decides *when* the allocation is answered,
    never *what* it is: which FPGA a claim gets depends on the observed books alone.
    """

    def __init__(
        self,
        *,
        pool: Sequence[Fpga | Mapping[str, Any]] = DEFAULT_POOL,
        programming_steps: int = 2,
        programming_delay_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = {
            f.name: f for f in (x if isinstance(x, Fpga) else msgspec.convert(x, Fpga) for x in pool)
        }
        self._steps = max(0, programming_steps)
        self._delay = max(0.0, float(programming_delay_s))
        self._clock = clock
        self._nodes: dict[str, dict[str, str]] = {}
        self._owner: dict[str, str] = {}  # fpga -> claim uid (allocated or being programmed)
        self._programming: dict[str, _Programming] = {}  # claim uid -> progress
        self._done: dict[str, AllocationResult] = {}  # claim uid -> result (idempotent answers)

    @property
    def driver_name(self) -> str:
        return DRIVER_NAME

    # -- inventory -------------------------------------------------------------------------

    def observe(self, obj: ApiStruct) -> None:
        if isinstance(obj, c1.Node):
            self._nodes[obj.metadata.name] = dict(obj.metadata.labels)
        elif isinstance(obj, cv.ResourceClaim) and obj.status.driver_name == DRIVER_NAME:
            fpga = obj.status.attributes.get("fpga")
            if cl.phase(obj) != cv.PENDING and fpga in self._pool:
                self._owner[fpga] = obj.metadata.uid
                self._done[obj.metadata.uid] = AllocationResult(
                    attributes=dict(obj.status.attributes),
                    available_on_nodes=cl.scheduling(obj).driver.available_on_nodes,
                    user_limit=obj.status.user_limit if obj.status.user_limit is not None else 1,
                )

    def reachable(self, node: str, params: FpgaParameters) -> bool:
        return self._nodes.get(node, {}).get(FABRIC_LABEL) == params.fabric_label

    def free_fpgas(self) -> list[str]:
        return sorted(n for n in self._pool if n not in self._owner)

    # -- plugin calls ----------------------------------------------------------------------

    def _fits(self, fpga: Fpga, params: FpgaParameters) -> bool:
        return params.memory is None or not Quantity.parse(fpga.memory) < Quantity.parse(params.memory)

    def _result(self, fpga: str, params: FpgaParameters) -> AllocationResult:
        req = NodeSelectorRequirement(key=FABRIC_LABEL, operator="In", values=(params.fabric_label,))
        attrs = {"fpga": fpga, "bitstream": params.bitstream, "memory": self._pool[fpga].memory}
        return AllocationResult(
            attributes=attrs,
            available_on_nodes=NodeSelector(
                node_selector_terms=(NodeSelectorTerm(match_expressions=(req,)),)
            ),
            user_limit=params.users,
        )

    def allocate(
        self,
        claim: cv.ResourceClaim,
        resource_class: cv.ResourceClass,
        parameters: Parameters,
        selected_node: str | None,
    ) -> AllocateOutcome:
        uid = claim.metadata.uid
        if uid in self._done:
            return self._done[uid]
        params = parse_parameters(parameters.class_parameters, parameters.claim_parameters)
        if isinstance(params, str):
            return Failure(reason=params, definite=True)
        if selected_node is not None and not self.reachable(selected_node, params):
            return Failure(reason=f"node {selected_node} cannot reach the FPGA fabric", definite=True)
        progress = self._programming.get(uid)
        if progress is None:
            fit = [n for n in self.free_fpgas() if self._fits(self._pool[n], params)]
            if not fit:
                if not any(self._fits(f, params) for f in self._pool.values()):
                    return Failure(reason=f"no FPGA has {params.memory} of memory", definite=True)
                return Failure(reason="all suitable FPGAs are in use")
            ready_at = self._clock() + self._delay if self._delay else 0.0
            progress = _Programming(fpga=fit[0], remaining=self._steps, ready_at=ready_at)
            self._owner[fit[0]] = uid
            self._programming[uid] = progress
        if progress.remaining > 0:
            progress.remaining -= 1
            done = self._steps - progress.remaining
            return InProgress(
                reason=f"programming {params.bitstream} on {progress.fpga} ({done}/{self._steps})"
            )
        if progress.ready_at and self._clock() < progress.ready_at:
            left = progress.ready_at - self._clock()
            return InProgress(reason=f"programming {params.bitstream} on {progress.fpga} ({left:.1f}s left)")
        del self._programming[uid]
        result = self._result(progress.fpga, params)
        self._done[uid] = result
        return result

    def deallocate(self, claim: cv.ResourceClaim) -> DeallocateOutcome:
        uid = claim.metadata.uid
        self._done.pop(uid, None)
        self._programming.pop(uid, None)
        for fpga, owner in list(self._owner.items()):
            if owner == uid:
                del self._owner[fpga]  # reset: the next user gets a clean, reprogrammed device
        return Freed()

    def unsuitable_nodes(
        self, pod: c1.Pod | None, claims: Sequence[ClaimAllocation], potential_nodes: Sequence[str]
    ) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        for ca in claims:
            params = parse_parameters(ca.parameters.class_parameters, ca.parameters.claim_parameters)
            if isinstance(params, str):
                out[ca.claim.metadata.name] = tuple(potential_nodes)
            else:
                out[ca.claim.metadata.name] = tuple(
                    n for n in potential_nodes if not self.reachable(n, params)
                )
        return out


def create_plugin(**options: Any) -> FpgaController:
    """Entry point ``draflow.classic_drivers: fpga.example.com``."""
    return FpgaController(**options)
