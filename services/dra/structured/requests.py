"""Claim validation: turn each claim's requests into the search's per-(sub)request data.

Checks happen before any search, claims in input order and requests in spec order, with
upstream's error texts (``claim NS/NAME, request R: ...``). All-mode requests fix their device
list here; the 32-results limit is checked against the smallest possible device count.
"""

from __future__ import annotations

from collections.abc import Callable

from draflow.events.api.resource_v1 import (
    DeviceClass,
    DeviceSubRequest,
    DeviceToleration,
    ExactDeviceRequest,
    ResourceClaim,
)
from draflow.events.quantity import Quantity
from draflow.services.dra.structured.constraints import Constraint, DistinctAttribute, MatchAttribute
from draflow.services.dra.structured.model import RESULTS_MAX_SIZE, Features, InvalidInputError
from draflow.services.dra.structured.prepared import PreparedDevice

__all__ = ["ClaimData", "RequestData", "RequestSlot", "check_claims", "claim_ref", "validate_claims"]


def claim_ref(claim: ResourceClaim) -> str:
    meta = claim.metadata
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


class RequestData:
    """One request without subrequests, or one subrequest of a firstAvailable request."""

    __slots__ = (
        "admin",
        "all_devices",
        "all_mode",
        "base",
        "capacity",
        "claim_index",
        "claim_ref",
        "class_",
        "class_selectors",
        "constraints",
        "exceeded",
        "label",
        "misses",
        "name",
        "num_devices",
        "reached",
        "request_selectors",
        "selectable",
        "sub",
        "tolerations",
        "tried",
        "usable",
    )

    def __init__(
        self, claim: ClaimData, base: str, sub: str | None, spec: ExactDeviceRequest | DeviceSubRequest
    ) -> None:
        self.claim_index = claim.index
        self.claim_ref = claim.ref
        self.base = base
        self.sub = sub
        self.name = base if sub is None else f"{base}/{sub}"
        # Upstream names the (sub)request by its own name in error messages.
        self.label = base if sub is None else sub
        self.admin = bool(getattr(spec, "admin_access", None))
        self.tolerations: tuple[DeviceToleration, ...] = spec.tolerations
        self.capacity: dict[str, Quantity] | None = (
            {k: Quantity.parse(v) for k, v in spec.capacity.requests.items()}
            if spec.capacity is not None
            else None
        )
        self.request_selectors: tuple[str, ...] = ()
        self.class_selectors: tuple[str | None, ...] = ()
        self.class_: DeviceClass | None = None
        self.all_mode = False
        self.num_devices = 0
        self.all_devices: list[PreparedDevice] = []
        self.constraints: tuple[Constraint, ...] = ()
        # Device -> selectable verdict for this (sub)request (selectors + per-device node scope).
        self.selectable: dict[PreparedDevice, bool] = {}
        # Device -> search verdict: 0 unusable, 1 usable, 2 usable if its capacity still fits.
        self.usable: dict[PreparedDevice, int] = {}
        # What the search learnt, for the diagnosis of a failed Allocate (see diagnosis.py):
        # whether it looked for devices, the most it held at once, whether the claim's 32-results
        # limit stopped it, and constraint -> devices that constraint turned away.
        self.tried = False
        self.reached = 0
        self.exceeded = False
        self.misses: dict[str, set[tuple[str, str, str]]] | None = None


class RequestSlot:
    """A top-level request: exactly one RequestData, or the alternatives of firstAvailable."""

    __slots__ = ("name", "options", "selected", "subrequests")

    def __init__(self, name: str, options: list[RequestData], subrequests: bool) -> None:
        self.name = name
        self.options = options
        self.subrequests = subrequests
        self.selected = 0

    @property
    def chosen(self) -> RequestData:
        return self.options[self.selected]


class ClaimData:
    """A claim being allocated: its request slots, constraints and the devices taken so far."""

    __slots__ = ("claim", "constraints", "index", "ref", "results", "slots")

    def __init__(self, index: int, claim: ResourceClaim) -> None:
        self.index = index
        self.claim = claim
        self.ref = claim_ref(claim)
        self.slots: list[RequestSlot] = []
        self.constraints: list[Constraint] = []
        # (request data, device, consumed capacity of a shared device or None), in pick order.
        self.results: list[tuple[RequestData, PreparedDevice, dict[str, Quantity] | None]] = []


# Called for All-mode requests: (request data) -> the devices "all" stands for.
AllDevicesFn = Callable[[RequestData], list[PreparedDevice]]


def _request(
    claim: ClaimData,
    rd: RequestData,
    spec: ExactDeviceRequest | DeviceSubRequest,
    classes: Callable[[str], DeviceClass | None],
    features: Features,
    all_devices: AllDevicesFn,
) -> None:
    where = f"claim {claim.ref}, request {rd.label}"
    for i, sel in enumerate(spec.selectors):
        if sel.cel is None:
            raise InvalidInputError(
                f"{where}, selector #{i}: CEL expression empty (unsupported selector type?)"
            )
    rd.request_selectors = tuple(sel.cel.expression for sel in spec.selectors if sel.cel is not None)
    if getattr(spec, "admin_access", None) is not None and not features.admin_access:
        raise InvalidInputError(f"{where}: admin access is requested, but the feature is disabled")
    if not spec.device_class_name:
        raise InvalidInputError(f"{where}: missing device class name (unsupported request type?)")
    cls = classes(spec.device_class_name)
    if cls is None:
        raise InvalidInputError(
            f"{where}: could not retrieve device class {spec.device_class_name}: "
            f'deviceclass.resource.k8s.io "{spec.device_class_name}" not found'
        )
    rd.class_ = cls
    # None marks a class selector without CEL (refused when first evaluated).
    rd.class_selectors = tuple(
        sel.cel.expression if sel.cel is not None else None for sel in cls.spec.selectors
    )
    mode = spec.allocation_mode
    if mode == "ExactCount":
        rd.num_devices = spec.count
    elif mode == "All":
        rd.all_mode = True
        rd.all_devices = all_devices(rd)
        rd.num_devices = len(rd.all_devices)
    else:
        raise InvalidInputError(f"{where}: unsupported count mode {mode}")


def validate_claims(
    claims: list[ResourceClaim],
    classes: Callable[[str], DeviceClass | None],
    features: Features,
    all_devices: AllDevicesFn,
) -> list[ClaimData]:
    out: list[ClaimData] = []
    for ci, claim in enumerate(claims):
        cd = ClaimData(ci, claim)
        min_devices = 0
        for req in claim.spec.devices.requests:
            if req.first_available and not features.prioritized_list:
                raise InvalidInputError(
                    f"claim {cd.ref}, request {req.name}: has subrequests, "
                    "but the DRAPrioritizedList feature is disabled"
                )
            if not features.consumable_capacity:
                if req.exactly is not None and req.exactly.capacity is not None:
                    raise InvalidInputError(
                        f"claim {cd.ref}, request {req.name}: has capacity requests, "
                        "but the DRAConsumableCapacity feature is disabled"
                    )
                for sub in req.first_available:
                    if sub.capacity is not None:
                        raise InvalidInputError(
                            f"claim {cd.ref}, subrequest {sub.name}: has capacity requests, "
                            "but the DRAConsumableCapacity feature is disabled"
                        )
            if req.first_available:
                options = []
                for sub in req.first_available:
                    rd = RequestData(cd, req.name, sub.name, sub)
                    _request(cd, rd, sub, classes, features, all_devices)
                    options.append(rd)
                min_devices += min(rd.num_devices for rd in options)
                cd.slots.append(RequestSlot(req.name, options, True))
            else:
                spec = req.exactly if req.exactly is not None else ExactDeviceRequest()
                rd = RequestData(cd, req.name, None, spec)
                _request(cd, rd, spec, classes, features, all_devices)
                min_devices += rd.num_devices
                cd.slots.append(RequestSlot(req.name, [rd], False))
        if min_devices > RESULTS_MAX_SIZE:
            raise InvalidInputError(
                f"claim {cd.ref}: number of requested devices {min_devices} "
                f"exceeds the claim limit of {RESULTS_MAX_SIZE}"
            )
        for i, con in enumerate(claim.spec.devices.constraints):
            c: Constraint
            if con.match_attribute is not None:
                c = MatchAttribute(con.match_attribute, con.requests, features.list_type_attributes)
            elif con.distinct_attribute is not None:
                c = DistinctAttribute(con.distinct_attribute, con.requests, features.list_type_attributes)
            else:
                raise InvalidInputError(
                    f"claim {cd.ref}, constraint #{i}: empty constraint (unsupported constraint type?)"
                )
            cd.constraints.append(c)
        for slot in cd.slots:
            for rd in slot.options:
                rd.constraints = tuple(c for c in cd.constraints if c.covers(rd.base, rd.sub))
        out.append(cd)
    return out


def check_claims(
    claims: list[ResourceClaim], classes: Callable[[str], DeviceClass | None], features: Features
) -> None:
    """The checks of ``validate_claims`` that do not depend on a node's devices (feature gates,
    classes, count modes, the 32-results limit counting All requests as no device, constraints):
    raises the InvalidInputError every Allocate call would raise for these claims on any node."""
    validate_claims(claims, classes, features, lambda rd: [])
