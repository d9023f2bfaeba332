"""``draflow simulate``: Cluster Autoscaler's questions answered from the log (KEP-4381).

    draflow simulate [--as-of-seq N | --as-of-time T] [--node-group NAME=NODE|FILE[:MAX]]...
                     [--pods FILE]... [--remove-node NODE]... [-o wide|json|yaml]

The snapshot is the log folded to that point (default: its end), read straight from JetStream
as ``--as-of-seq`` does for ``get``. The scheduler's own plugins decide, through the
``ClusterAutoScalerPlugin`` interface (``draflow.services.scheduler.framework.simulation``); the
estimate is ``draflow.services.scheduler.autoscaler``. Nothing is appended. Exit code 0 when
every pod fits and every node listed can go, 1 otherwise. See docs/simulate.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import msgspec

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api.core_v1 import Node, Pod
from draflow.events.api.numeric_v1alpha2 import NodeResourceCapacity
from draflow.events.api.registry import resource_types
from draflow.events.api.resource_v1 import ResourceSlice
from draflow.services.cli.asof import add_as_of_args, fold_objects, open_log, resolve_bound
from draflow.services.cli.common import add_connection_args
from draflow.services.cli.main import UserError
from draflow.services.cli.simulate_input import parse_node_group, read_pods
from draflow.services.runtime import printers
from draflow.services.scheduler.autoscaler import Estimate, estimate, is_pending, new_simulation, queue_order
from draflow.services.scheduler.autoscaler.estimator import DeviceResult
from draflow.services.scheduler.framework.simulation import SimulationError

__all__ = ["register", "render_json", "render_table", "simulate_objects"]

KINDS = ("DeviceClass", "Node", "ResourceSlice", "DeviceTaintRule", "ResourceClaim", "Pod")
NUMERIC_KINDS = (cv.CLASS_KIND, nv.KIND, cv.CLAIM_KIND)
_NOT_PARAMETERS = frozenset({"Saga", "Event", "PodSchedulingContext", "Lease", "Namespace"})


def register(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="would pending pods fit, on how many new nodes; can a node go (Cluster Autoscaler's view)",
    )
    add_as_of_args(p)
    p.add_argument(
        "--node-group",
        action="append",
        default=[],
        metavar="NAME=NODE|FILE[:MAX]",
        help="new nodes like an existing NODE, or like the Node and slices of a template FILE",
    )
    p.add_argument(
        "--pods", action="append", default=[], metavar="FILE", help="more pods (Pod, Deployment, Job)"
    )
    p.add_argument("--remove-node", action="append", default=[], metavar="NODE", help="can this node go?")
    p.add_argument("-o", "--output", choices=("wide", "json", "yaml"), default=None)
    add_connection_args(p)
    p.set_defaults(func=run)


def simulate_objects(
    objects: dict[tuple[str, str, str], object],
    node_groups: list[str],
    pod_files: list[str],
    remove: list[str],
) -> Estimate:
    """The whole command on objects (kind, namespace, name) -> object; pure but for reading files."""
    nodes = {
        name: obj for (kind, _, name), obj in objects.items() if kind == "Node" and isinstance(obj, Node)
    }
    slices = [obj for (kind, _, _), obj in sorted(objects.items()) if isinstance(obj, ResourceSlice)]
    for name in remove:
        if name not in nodes:
            raise UserError(f"--remove-node: node {name!r} not found")
    if len(set(remove)) != len(remove):
        raise UserError("--remove-node: a node is named twice")
    capacities = [o for _, o in sorted(objects.items()) if isinstance(o, NodeResourceCapacity)]
    groups = [parse_node_group(spec, nodes, slices, capacities) for spec in node_groups]
    if len({g.name for g in groups}) != len(groups):
        raise UserError("--node-group: a group name is used twice")
    extra = read_pods(pod_files, objects)
    snapshot = [
        obj
        for (kind, _, _), obj in sorted(objects.items(), key=_kind_order)
        if kind != "ResourceClaimTemplate"
    ]
    try:
        sim = new_simulation([*snapshot, *extra.claims])
    except SimulationError as exc:
        raise UserError(str(exc)) from None
    log_pods = [p for (kind, _, _), p in objects.items() if kind == "Pod" and isinstance(p, Pod)]
    pending = queue_order([p for p in log_pods if is_pending(p)]) + extra.pods
    return estimate(sim, pending, groups, remove)


def _kind_order(item: tuple[tuple[str, str, str], object]) -> tuple[int, str, str]:
    (kind, ns, name), _ = item
    return (KINDS.index(kind) if kind in KINDS else len(KINDS), ns, name)


async def _fold(args: argparse.Namespace) -> tuple[int, dict[tuple[str, str, str], object]]:
    async with open_log(args) as store:
        if args.as_of_seq is None and args.as_of_time is None:
            bound = await store.stream_last_seq()
        else:
            bound = await resolve_bound(store, args)
        index = await fold_objects(store, bound)
    objects: dict[tuple[str, str, str], object] = {}
    served = {rt.kind for rt in resource_types() if not rt.crd}
    # numeric parameters (KEP-4381): classes, classic claims, capacity, and vendor parameter
    # objects (kinds draflow does not serve itself: CustomResourceDefinitions' objects)
    extra = [
        k
        for k in sorted(index.kinds())
        if k in NUMERIC_KINDS or (k not in served and k not in _NOT_PARAMETERS)
    ]
    for kind in (*KINDS, "ResourceClaimTemplate", *extra):
        for obj in index.items(kind):
            if isinstance(obj, dict):  # a CustomResourceDefinition's object: plain JSON
                meta = obj.get("metadata") or {}
                objects[(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = obj
                continue
            m = obj.metadata  # type: ignore[attr-defined]
            objects[(kind, m.namespace, m.name)] = obj
    return bound, objects


def run(args: argparse.Namespace) -> int:
    bound, objects = asyncio.run(_fold(args))
    result = simulate_objects(objects, args.node_group, args.pods, args.remove_node)
    if args.output == "json":
        print(printers.to_json(render_json(bound, result)))
    elif args.output == "yaml":
        sys.stdout.write(printers.to_yaml(render_json(bound, result)))
    else:
        sys.stdout.write(render_table(bound, result, wide=args.output == "wide"))
    return 0 if result.fits else 1


# -- output -----------------------------------------------------------------------------------------


def render_json(bound: int, result: Estimate) -> dict[str, Any]:
    """``{"asOfSeq", "pods", "nodeGroups", "removeNodes", "fits"}``: one object, stable key order."""
    body = msgspec.to_builtins(result)
    return {"asOfSeq": bound, **body, "fits": result.fits}


def _device(d: DeviceResult) -> str:
    return f"{d.driver}/{d.pool}/{d.device}" + (" (admin)" if d.admin_access else "")


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def render_table(bound: int, result: Estimate, *, wide: bool = False) -> str:
    lines = [f"Simulated on the log at seq {bound}."]
    if result.pods:
        head = ["POD", "NODE", "NEW", *(["DEVICES"] if wide else []), "REASON"]
        rows = [head]
        for p in result.pods:
            devices = [", ".join(_device(d) for d in p.devices) or "-"] if wide else []
            new = p.node_group if p.new_node and p.node_group else "-"
            reason = p.reason or "-"
            if p.node_group_reasons:
                reason += "".join(f" [{g}: {r}]" for g, r in p.node_group_reasons.items())
            rows.append([f"{p.namespace}/{p.name}", p.node or "<none>", new, *devices, reason])
        lines += ["", *_table(rows)]
    else:
        lines += ["", "No pending pods."]
    if result.node_groups:
        rows = [["NODE GROUP", "TEMPLATE", "NEW NODES", "MAX", *(["NODES"] if wide else [])]]
        for name, g in result.node_groups.items():
            nodes = [", ".join(g.nodes) or "-"] if wide else []
            max_nodes = str(g.max_nodes) if g.max_nodes is not None else "-"
            rows.append([name, g.template, str(g.new_nodes), max_nodes, *nodes])
        lines += ["", *_table(rows)]
    if result.remove_nodes:
        rows = [["REMOVE NODE", "REMOVABLE", "POD", "TO", *(["DEVICES"] if wide else []), "REASON"]]
        for name, r in result.remove_nodes.items():
            verdict = "yes" if r.removable else "no"
            if not r.moves:
                rows.append([name, verdict, "-", "-", *(["-"] if wide else []), "-"])
            for m in r.moves:
                devices = [", ".join(_device(d) for d in m.devices) or "-"] if wide else []
                rows.append(
                    [name, verdict, f"{m.namespace}/{m.name}", m.node or "<none>", *devices, m.reason or "-"]
                )
        lines += ["", *_table(rows)]
    placed = sum(1 for p in result.pods if p.node is not None)
    new_nodes = sum(g.new_nodes for g in result.node_groups.values())
    summary = f"{placed}/{len(result.pods)} pods fit, {new_nodes} new node{'s' if new_nodes != 1 else ''}"
    if result.remove_nodes:
        removable = sum(1 for r in result.remove_nodes.values() if r.removable)
        summary += f", {removable}/{len(result.remove_nodes)} nodes removable"
    lines += ["", summary + "."]
    return "\n".join(lines) + "\n"
