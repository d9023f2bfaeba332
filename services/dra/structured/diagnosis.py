"""Why an Allocate call found no fit, per (sub)request: the search's by-product, told in counts.

When the search fails, each (sub)request gets one :class:`RequestDiagnosis` line for the node:
how many of the node's devices its DeviceClass accepts, how many of those its own selectors
accept, what ruled out the rest (allocated to other claims, node selector, binding conditions,
capacity, taints, counters: the checks the search applies, in its order), how many were left,
and how many the search managed to hold at once. The selector verdicts come from the caches the
search filled (a selector runs once per device for as long as the slice lives); what the search
alone can know — the most devices it held, which constraint turned devices away, whether the
claim's 32-results limit stopped it — it recorded while it ran (``RequestData.reached``,
``misses``, ``exceeded``). Nothing is searched again: this is one pass over the node's devices
per (sub)request, and only after a failed search.

``group`` merges the lines of many nodes into one line per distinct outcome (the scheduler asks
about hundreds of nodes; the event keeps a handful of lines).
"""

from __future__ import annotations

import functools
import heapq
import re
from collections.abc import Iterable

from draflow.events.dra import MAX_NODE_NAMES, MAX_REQUEST_LINES, DeviceElimination, RequestDiagnosis
from draflow.services.dra.structured.capacity import CapacityLedger
from draflow.services.dra.structured.counters import CounterLedger
from draflow.services.dra.structured.model import (
    AllocatedState,
    AllocationTimeout,
    Features,
    InvalidInputError,
)
from draflow.services.dra.structured.pools import NodePools
from draflow.services.dra.structured.prepared import PreparedDevice
from draflow.services.dra.structured.requests import ClaimData, RequestData
from draflow.services.dra.structured.selection import selectors_match, taint_blocks

__all__ = ["diagnose", "event_message", "explain_lines", "group", "natural", "outcome"]

# Elimination reasons, in the order the search checks them (the first one that applies counts).
CEL_ERROR = "CEL error"
NODE_SELECTOR = "node selector"
BINDING_CONDITIONS = "binding conditions"
ALLOCATED = "allocated"
PARTITIONABLE = "partitionable devices off"
CAPACITY = "capacity"
TAINTS = "taints"
COUNTERS = "counters"


def outcome(
    asked: int,
    all_devices: bool,
    class_matched: int,
    selected: int,
    usable: int,
    found: int,
    *,
    device_class: str = "",
    constraints: Iterable[str] = (),
    exceeded: bool = False,
    tried: bool = True,
) -> str:
    """The verdict in words, from the counts (shared with the scheduler's device-index lines)."""
    if all_devices and asked == 0:
        if selected == 0:
            return (
                f"no device of the node matches (class {device_class})"
                if class_matched
                else (f"the node has no device of class {device_class}")
            )
        return "allocationMode All: no usable device"
    if found >= asked:
        return "fits"
    if class_matched == 0:
        return f"the node has no device of class {device_class}"
    if selected == 0:
        return f"the request's selectors match none of the {class_matched} devices of the class"
    if usable < asked:
        return f"too few devices: {usable} usable, {asked} asked"
    if exceeded:
        return "the claim would need more than 32 devices"
    names = sorted(constraints)
    if names:
        return f"{', '.join(names)}: at most {found} of {asked} devices satisfy it together"
    if not tried:
        return "not tried: an earlier request of the pod could not be satisfied"
    return f"only {found} of {asked} left after the pod's other requests took theirs"


def _selectors(
    cache: dict[tuple[tuple[str | None, ...], PreparedDevice], bool | None],
    selectors: tuple[str | None, ...],
    dev: PreparedDevice,
) -> bool | None:
    """All selectors true? None: a selector could not be evaluated (the search would raise)."""
    key = (selectors, dev)
    if key in cache:
        return cache[key]
    verdict: bool | None
    try:
        verdict = selectors_match(selectors, dev, lambda i: f"selector #{i}")
    except (InvalidInputError, AllocationTimeout):
        verdict = None
    cache[key] = verdict
    return verdict


def _request_line(
    rd: RequestData,
    node_name: str,
    pools: NodePools,
    state: AllocatedState,
    counters: CounterLedger,
    capacity: CapacityLedger,
    features: Features,
    cache: dict[tuple[tuple[str | None, ...], PreparedDevice], bool | None],
) -> RequestDiagnosis:
    class_matched = selected = usable = 0
    eliminated: dict[str, int] = {}
    for dev in pools.candidates:
        verdict = _selectors(cache, rd.class_selectors, dev)
        if verdict is False:
            continue
        class_matched += 1
        if verdict is not None and rd.request_selectors:
            verdict = _selectors(cache, rd.request_selectors, dev)
            if verdict is False:
                continue
        selected += 1
        why = _eliminated_by(rd, dev, verdict is None, pools, state, counters, capacity, features)
        if why:
            eliminated[why] = eliminated.get(why, 0) + 1
        else:
            usable += 1
    misses = rd.misses or {}
    for label, devices in sorted(misses.items()):
        eliminated[label] = len(devices)
    asked = rd.num_devices
    cls = rd.class_
    class_name = cls.metadata.name if cls is not None else ""
    found = rd.reached
    return RequestDiagnosis(
        claim=rd.claim_ref,
        request=rd.name,
        device_class=class_name,
        asked=asked,
        all_devices=rd.all_mode,
        admin_access=rd.admin,
        class_matched=class_matched,
        selected=selected,
        eliminated=tuple(DeviceElimination(reason=r, devices=n) for r, n in eliminated.items()),
        usable=usable,
        found=found,
        outcome=outcome(
            asked,
            rd.all_mode,
            class_matched,
            selected,
            usable,
            found,
            device_class=class_name,
            constraints=misses,
            exceeded=rd.exceeded,
            tried=rd.tried,
        ),
        source="allocator",
        nodes=1,
        node_names=(node_name,),
    )


def _eliminated_by(
    rd: RequestData,
    dev: PreparedDevice,
    cel_error: bool,
    pools: NodePools,
    state: AllocatedState,
    counters: CounterLedger,
    capacity: CapacityLedger,
    features: Features,
) -> str:
    """The first check of the search that rules the device out for this request ("" = none)."""
    if cel_error:
        return CEL_ERROR
    if dev.slice.per_device and dev.id in pools.device_off_node:
        return NODE_SELECTOR
    if dev.binding_conditions and not features.device_binding_and_status:
        return BINDING_CONDITIONS
    multi = features.consumable_capacity and dev.allow_multiple
    if not rd.admin and not multi and dev.id in state.exclusive:
        return ALLOCATED
    if dev.consumes and not features.partitionable_devices:
        return PARTITIONABLE
    if features.consumable_capacity and not capacity.fits(dev, rd.capacity):
        return CAPACITY
    if features.device_taints and dev.taints and taint_blocks(dev, rd.tolerations):
        return TAINTS
    if dev.consumes and not (multi and capacity.in_use(dev, state)):
        pool = pools.by_id[dev.slice.pool_id]
        if not counters.try_consume(dev, pool):
            return COUNTERS
        counters.release(dev, pool)
    return ""


def diagnose(
    claims: list[ClaimData],
    node_name: str,
    pools: NodePools,
    state: AllocatedState,
    counters: CounterLedger,
    capacity: CapacityLedger,
    features: Features,
) -> list[RequestDiagnosis]:
    """One line per (sub)request of every claim, after a search that found no fit."""
    cache: dict[tuple[tuple[str | None, ...], PreparedDevice], bool | None] = {}
    return [
        _request_line(rd, node_name, pools, state, counters, capacity, features, cache)
        for cd in claims
        for slot in cd.slots
        for rd in slot.options
    ]


_DIGITS = re.compile(r"(\d+)")


@functools.lru_cache(maxsize=8192)
def natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key: node-2 before node-10 (memoised: the same node names come back every attempt)."""
    return tuple((1, int(p)) if p.isdigit() else (0, p) for p in _DIGITS.split(name))


def group(lines: Iterable[RequestDiagnosis], limit: int = MAX_REQUEST_LINES) -> tuple[RequestDiagnosis, ...]:
    """Merge the per-node lines: one line per (request, counts, outcome) with its node count and
    first node names (natural order). Lines stay in request order; the ``limit`` lines covering
    the most nodes are kept."""
    groups: dict[tuple[object, ...], tuple[RequestDiagnosis, list[str], int]] = {}
    order: dict[tuple[str, str], int] = {}
    for line in lines:
        order.setdefault((line.claim, line.request), len(order))
        key = (
            line.claim,
            line.request,
            line.device_class,
            line.asked,
            line.all_devices,
            line.admin_access,
            line.class_matched,
            line.selected,
            line.eliminated,
            line.usable,
            line.found,
            line.outcome,
            line.source,
        )
        hit = groups.get(key)
        if hit is None:
            groups[key] = (line, list(line.node_names), line.nodes)
        else:
            hit[1].extend(line.node_names)
            groups[key] = (hit[0], hit[1], hit[2] + line.nodes)
    merged = [
        RequestDiagnosis(
            **{
                **{f: getattr(first, f) for f in first.__struct_fields__},
                "nodes": count,
                "node_names": tuple(heapq.nsmallest(MAX_NODE_NAMES, names, key=natural)),
            }
        )
        for first, names, count in groups.values()
    ]
    if len(merged) > limit:
        keep = {id(x) for x in sorted(merged, key=lambda x: -x.nodes)[:limit]}
        merged = [x for x in merged if id(x) in keep]
    merged.sort(key=lambda x: (order[(x.claim, x.request)], -x.nodes))
    return tuple(merged)


def _counts(r: RequestDiagnosis) -> str:
    admin = "admin access, " if r.admin_access else ""
    asked = f"all ({r.asked})" if r.all_devices else str(r.asked)
    counts = [f"class {r.device_class} matched {r.class_matched}", f"selectors {r.selected}"]
    if r.eliminated:
        counts.append("eliminated " + ", ".join(f"{e.reason} {e.devices}" for e in r.eliminated))
    counts += [f"usable {r.usable}", f"found {r.found}"]
    return f"{admin}asked {asked}: {'; '.join(counts)}"


def _where(r: RequestDiagnosis) -> str:
    more = r.nodes - len(r.node_names)
    names = ", ".join(r.node_names) + (f" (+{more} more)" if more > 0 else "")
    return f"on {r.nodes} node{'s' if r.nodes != 1 else ''} ({names})"


def explain_lines(r: RequestDiagnosis) -> list[str]:
    """The line in words, as ``draflow explain`` prints it: verdict, counts, nodes."""
    source = f", per the {r.source}" if r.source else ""
    return [
        f"claim {r.claim}, request {r.request}: {r.outcome}",
        f"  {_counts(r)}",
        f"  {_where(r)}{source}",
    ]


def event_message(r: RequestDiagnosis, about: str) -> str:
    """One line for a Kubernetes Event; ``about`` names what the Event's object is not
    (``pod default/p`` on the claim's Event, ``claim default/c`` on the pod's)."""
    return f"{about}, request {r.request}: {r.outcome} ({_counts(r)}) {_where(r)}"
