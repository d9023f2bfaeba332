"""The cheap half of the DRA Filter: can these claims possibly fit here, and how well?

Each request of a claim to allocate becomes a slot with one option (``exactly``) or several
(``firstAvailable``, in preference order). An option is satisfiable on a node when the device
index shows enough free matching devices (ExactCount), at least one matching device that is all
free (All), or enough matching devices at all (adminAccess, which ignores usage). Counts of the
same signature add up across the pod's requests. This is a necessary condition only; the
allocator decides.

The estimate the Score uses comes out of the same pass: the prioritized-list points of the
options that would be taken (upstream's DRA score: 8 minus the subrequest index) and how many
matching devices stay free after the pod takes its share (the bin-packing criterion).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence

from draflow.events.api.resource_v1 import DeviceClass, ResourceClaim
from draflow.events.dra import MAX_NODE_NAMES, DeviceElimination, RequestDiagnosis
from draflow.services.dra.structured.diagnosis import ALLOCATED, natural, outcome
from draflow.services.scheduler.framework.devices import DeviceIndex, Sig
from draflow.services.scheduler.framework.devorder import SigOrder
from draflow.services.scheduler.framework.nodeinfo import NodeInfo

__all__ = [
    "FIRST_AVAILABLE_MAX",
    "Counts",
    "Estimate",
    "Option",
    "Slot",
    "compile_indexed",
    "compile_slots",
    "evaluate",
    "index_diagnosis",
    "precheck",
    "selector_errors",
]

FIRST_AVAILABLE_MAX = 8  # resource.k8s.io FirstAvailableDeviceRequestMaxSize

# (prioritized-list points, matching devices left free after the pod's share)
Estimate = tuple[int, int]
# (free matching devices, matching devices, shareable matching devices) on one node
Counts = tuple[int, int, int]


class Option:
    __slots__ = ("admin", "all_mode", "claim", "cls", "count", "request", "sig")

    def __init__(self, sig: Sig, cls: DeviceClass, count: int, all_mode: bool, admin: bool) -> None:
        self.sig = sig
        self.cls = cls
        self.count = count
        self.all_mode = all_mode
        self.admin = admin
        # who asks, for the diagnosis: "namespace/name" and the (sub)request's name
        self.claim = ""
        self.request = ""


class Slot:
    __slots__ = ("options", "prioritized")

    def __init__(self, options: tuple[Option, ...], prioritized: bool) -> None:
        self.options = options
        self.prioritized = prioritized


def _option(
    class_name: str,
    selectors: Sequence[object],
    mode: str,
    count: int,
    admin: bool,
    classes: dict[str, DeviceClass],
) -> Option | None:
    cls = classes.get(class_name)
    if cls is None:
        return None
    expressions: list[str] = []
    for sel in selectors:
        expr = getattr(getattr(sel, "cel", None), "expression", None)
        if expr is None:
            return None  # unsupported selector: leave it to the allocator
        expressions.append(expr)
    all_mode = mode == "All"
    return Option((class_name, tuple(expressions)), cls, max(count, 1), all_mode, admin)


def compile_slots(claims: Sequence[ResourceClaim], classes: dict[str, DeviceClass]) -> list[Slot] | None:
    """Slots for the precheck; None when some request cannot be prechecked (allocator only)."""
    slots: list[Slot] = []
    for claim in claims:
        meta = claim.metadata
        ref = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
        for req in claim.spec.devices.requests:
            ex = req.exactly
            if ex is not None:
                admin = bool(ex.admin_access)
                mode = ex.allocation_mode
                opt = _option(ex.device_class_name, ex.selectors, mode, ex.count, admin, classes)
                if opt is None:
                    return None
                opt.claim, opt.request = ref, req.name
                slots.append(Slot((opt,), False))
                continue
            options: list[Option] = []
            for sub in req.first_available:
                mode = sub.allocation_mode
                opt = _option(sub.device_class_name, sub.selectors, mode, sub.count, False, classes)
                if opt is None:
                    return None
                opt.claim, opt.request = ref, f"{req.name}/{sub.name}"
                options.append(opt)
            if not options:
                return None
            slots.append(Slot(tuple(options), True))
    return slots


def precheck(index: DeviceIndex, node: NodeInfo, slots: Sequence[Slot]) -> Estimate | None:
    """The estimate when every slot has a satisfiable option on ``node``, else None."""
    nd = index.node(node.name, node.labels)
    if nd.error is not None:
        return (0, 0)  # the allocator raises the pool error for this node
    name = node.name

    def counts(opt: Option) -> Counts:
        entry = index.entry(nd, name, opt.sig, opt.cls)
        return (entry.free, len(entry.devices), entry.multi)

    return evaluate(slots, counts)


def index_diagnosis(
    index: DeviceIndex,
    nodes: Iterable[NodeInfo],
    slots: Sequence[Slot],
    orders: Mapping[Sig, SigOrder] | None = None,
) -> list[RequestDiagnosis]:
    """Why the precheck turned ``nodes`` away, per (sub)request, from the index counts it used:
    devices of the class, of those the ones the request's selectors accept, how many are
    allocated, and what was left after the pod's earlier requests took their share (the order
    ``evaluate`` takes them in). Nodes with the same counts make one line (grouped here, before
    any line is built: hundreds of nodes cost a few dict entries each). Only asked about
    rejected nodes, after the cycle failed."""
    # (slot, option, the option, its class-only signature or None when it has no selectors of its own)
    plan = [
        (si, oi, opt, (opt.sig[0], ()) if opt.sig[1] else None)
        for si, slot in enumerate(slots)
        for oi, opt in enumerate(slot.options)
    ]
    # only a signature several requests ask for needs the running "taken by earlier requests" count
    sigs = [opt.sig for _, _, opt, _ in plan]
    shared = {sig for sig in sigs if sigs.count(sig) > 1}
    entry_of = index.entry
    groups: dict[tuple[int, int, int, int, int, int, int], list[str]] = {}
    if orders is not None and not shared and all(c is None and not o.all_mode for _, _, o, c in plan):
        # the best-fit indexes' per-node lists (the precheck's own counts): list lookups per node
        for si, oi, opt, _ in plan:
            order = orders[opt.sig]
            frees, totals, asked = order.free, order.total, opt.count
            for node in nodes:
                position = node.index
                selected = totals[position]
                allocated = 0 if opt.admin else selected - frees[position]
                usable = selected - allocated
                key = (si, oi, selected, selected, allocated, asked if usable > asked else usable, asked)
                names = groups.get(key)
                if names is None:
                    groups[key] = [node.name]
                else:
                    names.append(node.name)
        nodes = ()
    for node in nodes:
        name = node.name
        nd = index.node(name, node.labels)
        if nd.error is not None:
            continue
        needed: dict[Sig, int] = {}
        chosen_slot = -1
        for si, oi, opt, class_sig in plan:
            entry = entry_of(nd, name, opt.sig, opt.cls)
            selected = entry.total
            class_total = entry_of(nd, name, class_sig, opt.cls).total if class_sig is not None else selected
            allocated = 0 if opt.admin else len(entry.devices) - entry.free
            usable = selected - allocated
            if opt.all_mode:
                asked = selected
                found = usable if chosen_slot != si else 0
            else:
                asked = opt.count
                found = usable - needed.get(opt.sig, 0) if shared else usable
                found = asked if found > asked else max(found, 0)
            if chosen_slot != si and found >= asked and (asked > 0 or not opt.all_mode):
                chosen_slot = si
                if shared and opt.sig in shared and not opt.admin and not opt.all_mode:
                    needed[opt.sig] = needed.get(opt.sig, 0) + asked
            key = (si, oi, class_total, selected, allocated, found, asked)
            names = groups.get(key)
            if names is None:
                groups[key] = [name]
            else:
                names.append(name)
    out: list[RequestDiagnosis] = []
    for (si, oi, class_total, selected, allocated, found, asked), names in groups.items():
        opt = slots[si].options[oi]
        usable = selected - allocated
        out.append(
            RequestDiagnosis(
                claim=opt.claim,
                request=opt.request,
                device_class=opt.sig[0],
                asked=asked,
                all_devices=opt.all_mode,
                admin_access=opt.admin,
                class_matched=class_total,
                selected=selected,
                eliminated=(DeviceElimination(reason=ALLOCATED, devices=allocated),) if allocated else (),
                usable=usable,
                found=found,
                outcome=outcome(
                    asked, opt.all_mode, class_total, selected, usable, found, device_class=opt.sig[0]
                ),
                source="device index",
                nodes=len(names),
                node_names=tuple(heapq.nsmallest(MAX_NODE_NAMES, names, key=natural)),
            )
        )
    return out


def selector_errors(index: DeviceIndex, node: NodeInfo, slots: Sequence[Slot]) -> bool:
    """Does a selector of these slots fail on a device of ``node`` (a CEL runtime error, a device
    whose attributes cannot be CEL input)? The allocator raises there when it gets to that device,
    which upstream's Filter turns into an error for the whole scheduling attempt."""
    nd = index.node(node.name, node.labels)
    if nd.error is not None:
        return False
    return any(index.entry(nd, node.name, opt.sig, opt.cls).errors for slot in slots for opt in slot.options)


def compile_indexed(
    orders: Mapping[Sig, SigOrder], slots: Sequence[Slot]
) -> Callable[[int], Estimate | None]:
    """``evaluate`` specialised for one cycle: counts read from the best-fit indexes' per-node
    lists (no shareable devices there by construction), signatures numbered, no dicts per node.
    The returned function takes a node position."""
    sigs = list(dict.fromkeys(opt.sig for slot in slots for opt in slot.options))
    number = {sig: k for k, sig in enumerate(sigs)}
    frees = [orders[sig].free for sig in sigs]
    totals = [orders[sig].total for sig in sigs]
    plan = [
        (slot.prioritized, [(number[o.sig], o.count, o.all_mode, o.admin) for o in slot.options])
        for slot in slots
    ]
    width = len(sigs)

    def check(position: int) -> Estimate | None:
        free = [f[position] for f in frees]
        needed = [0] * width
        taken = [0] * width  # 1: devices taken, 2: all taken
        points = 0
        for prioritized, options in plan:
            for i, (k, count, all_mode, admin) in enumerate(options):
                if admin:
                    ok = totals[k][position] >= (1 if all_mode else count)
                elif all_mode:
                    total = totals[k][position]
                    ok = total >= 1 and free[k] == total
                else:
                    ok = free[k] - needed[k] >= count
                if not ok:
                    continue
                if not admin:
                    if all_mode:
                        taken[k] = 2
                    else:
                        needed[k] += count
                        taken[k] = taken[k] or 1
                if prioritized:
                    points += FIRST_AVAILABLE_MAX - i
                break
            else:
                return None
        free_after = 0
        for k in range(width):
            if taken[k] == 1 and free[k] > needed[k]:
                free_after += free[k] - needed[k]
        return (points, free_after)

    return check


def evaluate(slots: Sequence[Slot], counts: Callable[[Option], Counts]) -> Estimate | None:
    """Pick, per slot, the first satisfiable option; None when a slot has none.

    ``free_after`` sums, over the signatures the pod takes devices of, the matching devices that
    stay free (All takes them all; admin access takes none).
    """
    needed: dict[Sig, int] = {}
    chosen: dict[Sig, int] = {}  # sig -> free before the pod
    emptied: set[Sig] = set()
    points = 0
    for slot in slots:
        for i, opt in enumerate(slot.options):
            free, total, multi = counts(opt)
            if opt.admin:
                ok = total + multi >= (1 if opt.all_mode else opt.count)
            elif opt.all_mode:
                ok = total + multi >= 1 and free == total
            else:
                ok = free + multi - needed.get(opt.sig, 0) >= opt.count
            if not ok:
                continue
            if not opt.admin:
                chosen[opt.sig] = free
                if opt.all_mode:
                    emptied.add(opt.sig)
                else:
                    needed[opt.sig] = needed.get(opt.sig, 0) + opt.count
            if slot.prioritized:
                points += FIRST_AVAILABLE_MAX - i
            break
        else:
            return None
    free_after = 0
    for sig, free in chosen.items():
        if sig not in emptied:
            left = free - needed.get(sig, 0)
            if left > 0:
                free_after += left
    return (points, free_after)
