"""``draflow allocate SCENARIO.yaml``: run the structured allocator on one scenario file.

A scenario (schema: tests/allocator/vectors/README.md, the conformance vector format) names the
node being tried, the objects (Node, DeviceClass, ResourceSlice, ResourceClaim, DeviceTaintRule)
and the claims to allocate together. Prints one JSON object::

    {"ok": true, "error": null, "allocations": {"claim-0": {"devices": [...],
     "nodeSelector": {...} | null, "config": [...]}}}

``ok: false`` with ``error: null`` = does not fit the node; with an error string = the allocator
reported an error. Exit code 0 whenever the scenario was evaluated; 1 (reason on stderr) when the
file cannot be read or decoded.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import yaml

from events.api.base import ApiStruct
from events.api.codec import decode_object
from events.api.core_v1 import Node
from events.api.errors import ApiError
from events.api.resource_v1 import (
    DeviceClass,
    DeviceRequest,
    DeviceSubRequest,
    DeviceTaintRule,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceSlice,
)
from services.cli.main import UserError
from services.dra.structured import AllocatedState, AllocationError, Allocator, apply_taint_rules

__all__ = ["evaluate", "load_scenario", "register", "run"]


class Scenario(msgspec.Struct, frozen=True, kw_only=True):
    """The decoded scenario: objects by kind plus what to allocate where."""

    name: str
    node: Node
    classes: dict[str, DeviceClass]
    slices: list[ResourceSlice]
    claims: list[ResourceClaim]
    taint_rules: list[DeviceTaintRule]
    allocate: list[ResourceClaim]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "allocate",
        help="allocate devices for the claims of a scenario file (prints JSON)",
        description="Run the structured allocator on one scenario file (the allocator conformance vector "
        "format) and print the outcome as one JSON object. Exit 0 whenever the scenario was evaluated.",
    )
    p.add_argument("scenario", help="scenario YAML (the allocator conformance vector format)")
    p.add_argument("--node", help="try this node instead of the scenario's `node`")
    p.add_argument(
        "--claim", action="append", help="allocate these claims (repeatable) instead of `allocate`"
    )
    p.add_argument("--timeout", type=float, default=None, help="time budget in seconds (default: none)")
    p.add_argument("--indent", type=int, default=None, help="pretty-print the JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scenario = load_scenario(Path(args.scenario), node=args.node, claims=args.claim)
    out = evaluate(scenario, timeout=args.timeout)
    print(json.dumps(out, indent=args.indent))
    return 0


def _default_request(spec: ExactDeviceRequest | DeviceSubRequest) -> Any:
    """What the API server's defaulting does: allocationMode ExactCount, count 1."""
    mode = spec.allocation_mode or "ExactCount"
    count = spec.count if spec.count or mode != "ExactCount" else 1
    if mode == spec.allocation_mode and count == spec.count:
        return spec
    return msgspec.structs.replace(spec, allocation_mode=mode, count=count)


def _defaulted(claim: ResourceClaim) -> ResourceClaim:
    requests: list[DeviceRequest] = []
    for req in claim.spec.devices.requests:
        exactly = _default_request(req.exactly) if req.exactly is not None else None
        subs = tuple(_default_request(s) for s in req.first_available)
        requests.append(msgspec.structs.replace(req, exactly=exactly, first_available=subs))
    devices = msgspec.structs.replace(claim.spec.devices, requests=tuple(requests))
    return msgspec.structs.replace(claim, spec=msgspec.structs.replace(claim.spec, devices=devices))


def load_scenario(path: Path, *, node: str | None = None, claims: list[str] | None = None) -> Scenario:
    """Read and decode a scenario; UserError (one line, no traceback) when that is impossible."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a scenario must be a mapping with `node`, `objects` and `allocate`")
    objects = raw.get("objects")
    if not isinstance(objects, list):
        raise UserError(f"{path}: `objects` must be a list of manifests")
    decoded: list[ApiStruct] = []
    for i, manifest in enumerate(objects):
        try:
            decoded.append(decode_object(manifest))
        except ApiError as exc:
            raise UserError(f"{path}: objects[{i}]: {exc}") from None
    node_name = node or raw.get("node")
    if not isinstance(node_name, str) or not node_name:
        raise UserError(f"{path}: `node` must name the Node being tried")
    wanted = claims if claims else raw.get("allocate")
    if not isinstance(wanted, list) or not all(isinstance(c, str) for c in wanted):
        raise UserError(f"{path}: `allocate` must be a list of claim names")

    nodes = {o.metadata.name: o for o in decoded if isinstance(o, Node)}
    if node_name not in nodes:
        raise UserError(f"{path}: node {node_name!r} is not among the objects")
    all_claims = [_defaulted(o) for o in decoded if isinstance(o, ResourceClaim)]
    by_ref = {(c.metadata.namespace or "default", c.metadata.name): c for c in all_claims}
    chosen: list[ResourceClaim] = []
    for ref in wanted:
        ns, _, name = ref.rpartition("/")
        claim = by_ref.get((ns or "default", name))
        if claim is None:
            raise UserError(f"{path}: claim {ref!r} to allocate is not among the objects")
        chosen.append(claim)
    return Scenario(
        name=str(raw.get("name", path.stem)),
        node=nodes[node_name],
        classes={o.metadata.name: o for o in decoded if isinstance(o, DeviceClass)},
        slices=[o for o in decoded if isinstance(o, ResourceSlice)],
        claims=all_claims,
        taint_rules=[o for o in decoded if isinstance(o, DeviceTaintRule)],
        allocate=chosen,
    )


def evaluate(scenario: Scenario, *, timeout: float | None = None) -> dict[str, Any]:
    """Run the allocator; the JSON-ready answer of the output contract."""
    wanted = {id(c) for c in scenario.allocate}
    state = AllocatedState.from_claims(c for c in scenario.claims if id(c) not in wanted)
    slices = apply_taint_rules(scenario.slices, scenario.taint_rules)
    allocator = Allocator(slices, scenario.classes, state)
    try:
        results = allocator.allocate(scenario.node, scenario.allocate, timeout=timeout)
    except AllocationError as exc:
        return {"ok": False, "error": str(exc), "allocations": None}
    except Exception as exc:  # a bug, not the user's fault: still one line, no traceback
        raise UserError(f"internal error while allocating ({type(exc).__name__}): {exc}") from exc
    if results is None:
        return {"ok": False, "error": None, "allocations": None}
    allocations: dict[str, Any] = {}
    for claim, result in zip(scenario.allocate, results, strict=True):
        data = msgspec.to_builtins(result)
        devices = data.get("devices", {})
        allocations[claim.metadata.name] = {
            "devices": devices.get("results", []),
            "nodeSelector": data.get("nodeSelector"),
            "config": devices.get("config", []),
        }
    return {"ok": True, "error": None, "allocations": allocations}


if __name__ == "__main__":  # pragma: no cover
    from services.cli.main import main

    sys.exit(main(["allocate", *sys.argv[1:]]))
