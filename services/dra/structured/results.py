"""Turn a finished search into v1 AllocationResult Structs (status.allocation of each claim).

Per claim: the device results in pick order, class and claim config (upstream's rules for which
entries are copied and when ``requests`` collapses to empty = all) and the node selector saying
where the claim is usable. Share IDs of multi-allocatable devices are made here, after the search,
by an injectable generator so that replays give the same IDs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from events.api.meta import NodeSelector
from events.api.resource_v1 import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
    OpaqueDeviceConfiguration,
    ResourceClaim,
)
from services.dra.structured.model import DeviceID, Features, InvalidInputError
from services.dra.structured.nodeselector import merge_result_selector, node_name_selector
from services.dra.structured.prepared import SCOPE_NODE, SCOPE_SELECTOR, PreparedDevice
from services.dra.structured.requests import ClaimData

__all__ = ["ShareIDFactory", "build_results", "seeded_share_ids"]

# (claim, index of the result within the claim, device) -> a fresh shareID (a UID string).
ShareIDFactory = Callable[[ResourceClaim, int, DeviceID], str]

_NAMESPACE = uuid.UUID("6f1d4b1e-5d0a-4a8e-9a51-2f3c7d9e8b10")


def seeded_share_ids(seed: str = "") -> ShareIDFactory:
    """Deterministic share IDs: a UUIDv5 of (seed, claim UID or namespace/name, result index, device).

    Unique per claim and result; the same claim allocated again gets the same IDs, which is
    what replaying the event log needs. Pass a different seed to get a different series.
    """

    def make(claim: ResourceClaim, index: int, device: DeviceID) -> str:
        meta = claim.metadata
        who = meta.uid or f"{meta.namespace}/{meta.name}"
        return str(uuid.uuid5(_NAMESPACE, f"{seed}\x00{who}\x00{index}\x00{device}"))

    return make


def _node_selector(cd: ClaimData, node_name: str) -> NodeSelector | None:
    selectors: list[NodeSelector] = []
    for _, dev, _ in cd.results:
        slc = dev.slice
        if slc.per_device:
            scope, selector = dev.scope, dev.api.node_selector
        else:
            scope, selector = slc.scope, slc.api.spec.node_selector
        if scope == SCOPE_NODE or dev.binds_to_node:
            return node_name_selector(node_name)
        if scope == SCOPE_SELECTOR and selector is not None:
            selectors.append(selector)
    try:
        return merge_result_selector(selectors)
    except ValueError as exc:
        raise InvalidInputError(f"create NodeSelector for claim {cd.claim.metadata.name}: {exc}") from None


def _config(cd: ClaimData) -> tuple[DeviceAllocationConfiguration, ...]:
    if not cd.claim.spec.devices.config and not any(
        slot.chosen.class_ is not None and slot.chosen.class_.spec.config for slot in cd.slots
    ):
        return ()
    out: list[DeviceAllocationConfiguration] = []
    requests: list[list[str]] = []  # mutable requests lists, parallel to out
    sources: list[tuple[str, OpaqueDeviceConfiguration | None]] = []
    class_ranges: dict[str, range] = {}
    for slot in cd.slots:
        rd = slot.chosen
        cls = rd.class_
        if cls is None:
            continue
        name = cls.metadata.name
        if name in class_ranges:
            for i in class_ranges[name]:
                requests[i].append(rd.name)
            continue
        begin = len(sources)
        for class_entry in cls.spec.config:
            sources.append(("FromClass", class_entry.opaque))
            requests.append([rd.name])
        class_ranges[name] = range(begin, len(sources))
    chosen = {slot.chosen.name for slot in cd.slots if slot.subrequests}
    top = {slot.name for slot in cd.slots}
    for entry in cd.claim.spec.devices.config:
        if not entry.requests or any(r in top or r in chosen for r in entry.requests):
            sources.append(("FromClaim", entry.opaque))
            requests.append(list(entry.requests))
    for (source, opaque), names in zip(sources, requests, strict=True):
        wanted = set(names)
        covers_all = bool(names) and all(
            slot.name in wanted or (slot.subrequests and slot.chosen.name in wanted) for slot in cd.slots
        )
        out.append(
            DeviceAllocationConfiguration(
                source=source,
                requests=() if covers_all else tuple(names),
                opaque=opaque,
            )
        )
    return tuple(out)


def build_results(
    claims: list[ClaimData], node_name: str, features: Features, share_ids: ShareIDFactory, taken: set[str]
) -> list[AllocationResult]:
    """``taken``: shareIDs already in use (a generated ID colliding with one is re-derived)."""
    out: list[AllocationResult] = []
    for cd in claims:
        results: list[DeviceRequestAllocationResult] = []
        for index, (rd, dev, consumed) in enumerate(cd.results):
            share_id: str | None = None
            if features.consumable_capacity and dev.allow_multiple:
                share_id = _fresh(share_ids, cd.claim, index, dev, taken)
            results.append(
                DeviceRequestAllocationResult(
                    request=rd.name,
                    driver=dev.slice.driver,
                    pool=dev.slice.pool,
                    device=dev.name,
                    admin_access=True if rd.admin else None,
                    tolerations=rd.tolerations,
                    binding_conditions=dev.binding_conditions if features.device_binding_and_status else (),
                    binding_failure_conditions=(
                        dev.binding_failure_conditions if features.device_binding_and_status else ()
                    ),
                    share_id=share_id,
                    consumed_capacity={k: str(v) for k, v in consumed.items()} if consumed else {},
                )
            )
        out.append(
            AllocationResult(
                devices=DeviceAllocationResult(results=tuple(results), config=_config(cd)),
                node_selector=_node_selector(cd, node_name),
            )
        )
    return out


def _fresh(
    share_ids: ShareIDFactory, claim: ResourceClaim, index: int, dev: PreparedDevice, taken: set[str]
) -> str:
    share_id = share_ids(claim, index, dev.id)
    attempt = 0
    while share_id in taken:
        attempt += 1
        share_id = str(uuid.uuid5(_NAMESPACE, f"{share_id}\x00{attempt}"))
    taken.add(share_id)
    return share_id
