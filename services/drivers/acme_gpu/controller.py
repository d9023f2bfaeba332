"""gpu.acme.com control-plane plugin: partial GPUs packed first-fit per node.

State: each node's GPUs with their memory (from :class:`NodeGpuCapacity`) and, per GPU, the memory
each allocated claim holds. Rebuilt from allocated claims' attributes (``node``, ``gpu``,
``memory``) after a restart, so deallocation never needs the ResourceClass.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from events.api import classic_v1alpha1 as cv
from events.api import core_v1 as c1
from events.api.acme_gpu_v1alpha1 import NodeGpuCapacity
from events.api.base import ApiStruct
from events.quantity import Quantity
from services.dra.classic import claims as cl
from services.dra.classic.nodeselect import node_names_selector
from services.dra.classic.plugin import (
    AllocateOutcome,
    AllocationResult,
    ClaimAllocation,
    DeallocateOutcome,
    Failure,
    Freed,
    Parameters,
)
from services.drivers.acme_gpu.params import AcmeParameters, parse_parameters

__all__ = ["DRIVER_NAME", "AcmeGpuController", "create_plugin"]

DRIVER_NAME = "gpu.acme.com"
_ZERO = Quantity.parse(0)


class AcmeGpuController:
    """The ControllerPlugin of gpu.acme.com."""

    def __init__(self) -> None:
        self._capacity: dict[str, dict[str, Quantity]] = {}  # node -> gpu -> memory
        self._used: dict[tuple[str, str], dict[str, Quantity]] = {}  # (node, gpu) -> uid -> memory
        self._done: dict[str, AllocationResult] = {}  # uid -> result

    @property
    def driver_name(self) -> str:
        return DRIVER_NAME

    def observe(self, obj: ApiStruct) -> None:
        if isinstance(obj, NodeGpuCapacity):
            node = obj.spec.node_name or obj.metadata.name
            self._capacity[node] = {g.name: Quantity.parse(g.memory) for g in obj.spec.gpus}
        elif isinstance(obj, cv.ResourceClaim) and obj.status.driver_name == DRIVER_NAME:
            attrs = obj.status.attributes
            if cl.phase(obj) != cv.PENDING and {"node", "gpu", "memory"} <= set(attrs):
                uid = obj.metadata.uid
                self._used.setdefault((attrs["node"], attrs["gpu"]), {})[uid] = Quantity.parse(
                    attrs["memory"]
                )
                self._done[uid] = AllocationResult(
                    attributes=dict(attrs),
                    available_on_nodes=node_names_selector(attrs["node"]),
                    user_limit=obj.status.user_limit if obj.status.user_limit is not None else 1,
                )

    def free_memory(self, node: str) -> dict[str, Quantity]:
        """Per GPU of the node, the memory not held by any claim."""
        out = {}
        for gpu, total in self._capacity.get(node, {}).items():
            held = sum(self._used.get((node, gpu), {}).values(), _ZERO)
            out[gpu] = total - held
        return out

    @staticmethod
    def _pack(free: dict[str, Quantity], wants: Sequence[Quantity]) -> list[str] | None:
        """First fit by GPU name; None when some request does not fit."""
        left = dict(free)
        chosen = []
        for want in wants:
            gpu = next((g for g in sorted(left) if not left[g] < want), None)
            if gpu is None:
                return None
            left[gpu] = left[gpu] - want
            chosen.append(gpu)
        return chosen

    def _result(self, node: str, gpu: str, params: AcmeParameters) -> AllocationResult:
        attrs = {"node": node, "gpu": gpu, "memory": params.memory}
        if params.init_command:
            attrs["initCommand"] = json.dumps(list(params.init_command))
        return AllocationResult(attributes=attrs, available_on_nodes=node_names_selector(node), user_limit=1)

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
        want = params.memory_quantity()
        # Immediate allocation: the driver picks the node itself (first by name with room).
        nodes = [selected_node] if selected_node is not None else sorted(self._capacity)
        for node in nodes:
            packed = self._pack(self.free_memory(node), [want])
            if packed is not None:
                self._used.setdefault((node, packed[0]), {})[uid] = want
                result = self._result(node, packed[0], params)
                self._done[uid] = result
                return result
        if selected_node is None:
            return Failure(reason=f"no node has a GPU with {params.memory} free")
        if selected_node not in self._capacity:
            return Failure(reason=f"node {selected_node} has no ACME GPUs", definite=True)
        return Failure(reason=f"node {selected_node}: no GPU with {params.memory} free", definite=True)

    def deallocate(self, claim: cv.ResourceClaim) -> DeallocateOutcome:
        uid = claim.metadata.uid
        self._done.pop(uid, None)
        for held in self._used.values():
            held.pop(uid, None)
        return Freed()

    def unsuitable_nodes(
        self, pod: c1.Pod | None, claims: Sequence[ClaimAllocation], potential_nodes: Sequence[str]
    ) -> dict[str, tuple[str, ...]]:
        """A node is unsuitable for all of the pod's claims when they cannot all be packed there."""
        wants: list[Quantity] = []
        bad_params = False
        for ca in claims:
            params = parse_parameters(ca.parameters.class_parameters, ca.parameters.claim_parameters)
            if isinstance(params, str):
                bad_params = True
            else:
                wants.append(params.memory_quantity())
        unsuitable = tuple(
            n for n in potential_nodes if bad_params or self._pack(self.free_memory(n), wants) is None
        )
        return {ca.claim.metadata.name: unsuitable for ca in claims}


def create_plugin(**options: Any) -> AcmeGpuController:
    """Entry point ``draflow.classic_drivers: gpu.acme.com`` (no options)."""
    if options:
        raise TypeError(f"gpu.acme.com takes no options, got {sorted(options)}")
    return AcmeGpuController()
