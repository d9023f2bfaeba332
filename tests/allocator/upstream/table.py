"""Load upstream's allocator test table (``allocator_testing.go``) and check draflow against it.

Upstream's table is not copied into this repository: point ``DRAFLOW_UPSTREAM_ALLOCATOR_TESTING`` at
``structured/internal/allocatortesting/allocator_testing.go`` of kubernetes/dynamic-resource-allocation
(or keep a mirror at the default path) and ``tests/allocator/test_upstream_table.py`` evaluates every
case (it is skipped, saying so, when neither is there): the expected results (compared as upstream
does, ignoring order), expected error substrings and, where upstream pins it, the number of
``allocateOne`` invocations.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec

from events.api.codec import decode_object
from events.quantity import Quantity
from services.dra.structured import AllocatedState, AllocationError, Allocator
from services.dra.structured.model import Features
from tests.allocator.upstream import dsl, goeval
from tests.allocator.upstream.goeval import Env, Evaluator, Obj, Q, parse_expr, parse_stmts

_MIRROR = Path("/work/.mirror/kubernetes+dynamic-resource-allocation/repo")
_IN_REPO = "structured/internal/allocatortesting/allocator_testing.go"


MISSING = (
    "upstream allocator table not checked: allocator_testing.go not found; set "
    "DRAFLOW_UPSTREAM_ALLOCATOR_TESTING to its path (see tests/allocator/test_upstream_table.py)"
)


def upstream_source() -> str | None:
    """The Go source of the table, or None when it is not available on this machine.

    A path in ``DRAFLOW_UPSTREAM_ALLOCATOR_TESTING`` that cannot be read is an error (it was
    asked for); without the variable, a mirror at the default path is used when present."""
    path = os.environ.get("DRAFLOW_UPSTREAM_ALLOCATOR_TESTING")
    if path:
        return Path(path).read_text()
    if _MIRROR.is_dir() and shutil.which("git"):
        proc = subprocess.run(
            ["git", "--git-dir", str(_MIRROR), "show", f"HEAD:{_IN_REPO}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode == 0:
            return proc.stdout
    return None


SPECIAL = {
    "CEL": "cel",
    "IntValue": "int",
    "BoolValue": "bool",
    "StringValue": "string",
    "VersionValue": "version",
    "IntValues": "ints",
    "BoolValues": "bools",
    "StringValues": "strings",
    "VersionValues": "versions",
    "ObjectMeta": "metadata",
    "ShareID": "shareID",
    "UID": "uid",
}


def camel(name):
    return SPECIAL.get(name) or name[:1].lower() + name[1:]


def to_manifest(o):
    if isinstance(o, Q):
        return str(o)
    if isinstance(o, dict):
        out = {}
        for k, v in o.items():
            if k in ("_t", "_fromCounters") or v is None:
                continue
            if k == "DeviceConfiguration":
                out.update(to_manifest(v))
                continue
            key = camel(k) if isinstance(o, Obj) else k
            out[key] = to_manifest(v)
        return out
    if isinstance(o, list | tuple):
        return [to_manifest(x) for x in o]
    return o


def load_cases(src: str) -> dict[str, Any]:
    consts = goeval.load_consts(src)
    dsl.C.update(consts)
    env = Env(consts)
    env.vars.update(
        {
            "fixedShareID": "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa",
            "zero": Q("0"),
            "one": Q("1"),
            "two": Q("2"),
            "three": Q("3"),
            "four": Q("4"),
        }
    )
    ev = Evaluator(dsl.Helpers, env)
    start = src.index("func TestAllocator(")
    body_start = src.index("{\n", src.index(") {", start)) + 2
    table_start = src.index("\ttestcases := map[string]AllocatorTestCase{", start)
    ev.run_block(parse_stmts(src[body_start:table_start]), env)
    # find matching brace of the table
    i = src.index("{", table_start)
    depth = 0
    j = i
    in_str = None
    while True:
        c = src[j]
        if in_str:
            if c == "\\" and in_str == '"':
                j += 2
                continue
            if c == in_str:
                in_str = None
        elif c in '"`':
            in_str = c
        elif c == "/" and src[j + 1] == "/":
            j = src.index("\n", j)
            continue
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                break
        j += 1
    text = src[src.index("map[string]AllocatorTestCase", table_start) : j + 1]
    expr = parse_expr(text)
    return ev.ev(expr, env)


def build(case):
    node = case.get("node") or dsl.node("node-1", "region-1")

    def dec(kind, obj, api="resource.k8s.io/v1"):
        m = to_manifest(obj)
        m["apiVersion"] = api
        m["kind"] = kind
        return decode_object(m)

    node_obj = dec("Node", node, "v1")
    classes = {c["ObjectMeta"]["Name"]: dec("DeviceClass", c) for c in (case.get("classes") or [])}
    slices = [dec("ResourceSlice", s) for s in (case.get("slices") or [])]
    claims = [dec("ResourceClaim", c) for c in (case.get("claimsToAllocate") or [])]
    consumed = {}
    for did, caps in (case.get("allocatedCapacityDevices") or {}).items():
        consumed[did] = {k: Quantity.parse(str(v)) for k, v in caps.items()}
    state = AllocatedState.build(
        exclusive=[tuple(d) for d in (case.get("allocatedDevices") or [])],
        shared=[tuple(s) for s in (case.get("allocatedSharedDeviceIDs") or [])],
        consumed=consumed,
    )
    return node_obj, classes, slices, claims, state


def norm_sel(sel):
    if not sel:
        return None
    terms = []
    for t in sel.get("NodeSelectorTerms") or []:
        ex = frozenset(
            (r["Key"], r["Operator"], frozenset(r.get("Values") or []))
            for r in t.get("MatchExpressions") or []
        )
        fi = frozenset(
            (r["Key"], r["Operator"], frozenset(r.get("Values") or [])) for r in t.get("MatchFields") or []
        )
        terms.append((ex, fi))
    return frozenset(terms)


def norm_api_sel(sel):
    if sel is None:
        return None
    terms = []
    for t in sel.node_selector_terms:
        ex = frozenset((r.key, r.operator, frozenset(r.values)) for r in t.match_expressions)
        fi = frozenset((r.key, r.operator, frozenset(r.values)) for r in t.match_fields)
        terms.append((ex, fi))
    return frozenset(terms)


def norm_result_exp(r):
    cc = r.get("ConsumedCapacity") or {}
    return (
        r["Request"],
        r["Driver"],
        r["Pool"],
        r["Device"],
        bool(r.get("AdminAccess")),
        tuple(sorted(str(sorted(to_manifest(t).items())) for t in r.get("Tolerations") or [])),
        tuple(r.get("BindingConditions") or []),
        tuple(r.get("BindingFailureConditions") or []),
        r.get("ShareID") is not None,
        tuple(sorted((k, Quantity.parse(str(v)).nanos) for k, v in cc.items())),
    )


def norm_result_got(r):
    return (
        r.request,
        r.driver,
        r.pool,
        r.device,
        bool(r.admin_access),
        tuple(sorted(str(sorted(to_builtins(t).items())) for t in r.tolerations)),
        tuple(r.binding_conditions),
        tuple(r.binding_failure_conditions),
        r.share_id is not None,
        tuple(sorted((k, Quantity.parse(v).nanos) for k, v in r.consumed_capacity.items())),
    )


def to_builtins(x):

    return msgspec.to_builtins(x)


def norm_cfg_exp(cfgs):
    if not cfgs:
        return []
    return [
        (
            c.get("Source"),
            tuple(c.get("Requests") or []),
            str(to_manifest(c.get("Opaque") or c.get("DeviceConfiguration", {}).get("Opaque"))),
        )
        for c in cfgs
    ]


def norm_cfg_got(cfgs):
    return [
        (c.source, tuple(c.requests), str({"driver": c.opaque.driver, "parameters": c.opaque.parameters}))
        for c in cfgs
    ]


def compare(case, results, steps):
    exp = case.get("expectResults") or []
    if not exp:
        return [] if not results else [f"expected no results, got {len(results)}"]
    if not results:
        return ["expected results, got none"]
    if len(exp) != len(results):
        return [f"expected {len(exp)} claim results, got {len(results)}"]
    got_norm = []
    for r in results:
        got_norm.append(
            (
                norm_api_sel(r.node_selector),
                sorted(map(norm_result_got, r.devices.results)),
                [norm_result_got(x) for x in r.devices.results],
                norm_cfg_got(r.devices.config),
            )
        )
    problems = []
    unmatched = list(range(len(got_norm)))
    for e in exp:
        if e.get("_t") == "AllocationResult":
            devs = e.get("Devices") or {}
            e = {
                "NodeSelector": e.get("NodeSelector"),
                "Results": devs.get("Results"),
                "Config": devs.get("Config"),
            }
        esel = norm_sel(e.get("NodeSelector"))
        eres = [norm_result_exp(x) for x in e.get("Results") or []]
        ecfg = norm_cfg_exp(e.get("Config"))
        found = None
        for gi in unmatched:
            gsel, gsorted, _, gcfg = got_norm[gi]
            if gsel != esel or gsorted != sorted(eres) or gcfg != ecfg:
                continue
            found = gi
            break
        if found is None:
            problems.append(
                f"no match for expected {esel} {eres} cfg={ecfg}; "
                f"got {[(g[0], g[2], g[3]) for g in got_norm]}"
            )
        else:
            unmatched.remove(found)
    want_steps = case.get("expectNumAllocateOneInvocations")
    by = case.get("expectNumAllocateOneInvocationsByChannel") or {}
    if want_steps:
        if steps != want_steps:
            problems.append(f"allocateOne invocations: expected {want_steps} (by channel {by}), got {steps}")
    return problems


def check_case(name: str, case: dict[str, Any]) -> list[str]:
    """Differences between draflow's answer and upstream's expectation for one case (empty = agree)."""
    node, classes, slices, claims, state = build(case)
    feats = Features()
    if "disabled" in name or "without-feature-gate" in name:
        # These cases test a switched-off feature; every other case holds with everything on.
        f = case.get("features") or {}
        feats = Features(
            admin_access=bool(f.get("AdminAccess")),
            prioritized_list=bool(f.get("PrioritizedList")),
            partitionable_devices=bool(f.get("PartitionableDevices")),
            device_taints=bool(f.get("DeviceTaints")),
            device_binding_and_status=bool(f.get("DeviceBindingAndStatus")),
            consumable_capacity=bool(f.get("ConsumableCapacity")),
            list_type_attributes=bool(f.get("ListTypeAttributes")),
        )
    alloc = Allocator(slices, classes, state, features=feats)
    err = None
    results = None
    try:
        results = alloc.allocate(node, claims)
    except AllocationError as exc:
        err = str(exc)
    want_err = case.get("expectError")
    if want_err is not None:
        if err is None or want_err[1] not in err:
            return [f"expected error containing {want_err[1]!r}, got {err!r}"]
        return []
    if err is not None:
        return [f"unexpected error {err!r}"]
    return compare(case, results, alloc.last_steps)
