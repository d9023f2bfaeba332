"""Kubernetes' DRA end-to-end scenarios (``test/e2e/dra/dra.go``) and which draflow test covers each.

``UPSTREAM`` lists upstream's ``It`` texts with the ``Context`` they sit in (resource.k8s.io/v1
era). A draflow test that mirrors one carries ``@pytest.mark.upstream_e2e("<It text>")``
(``context=`` when the text is not unique); the table in ``docs/upstream-e2e.md`` is generated from
those markers, found by reading the test files (no collection), and ``tests/test_upstream_table.py``
checks that the page is up to date and that every marker names a scenario of this list.
Scenarios without a test say why in ``NOT_COVERED``.

``python -m tests.upstream_table`` rewrites the page; ``--check`` exits 1 when it differs.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NOT_COVERED", "PAGE", "UPSTREAM", "Marker", "markers", "render"]

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "upstream-e2e.md"
SOURCE = "test/e2e/dra/dra.go"

# (context, It text), in upstream's order.
UPSTREAM: tuple[tuple[str, str], ...] = (
    ("kubelet", "registers plugin"),
    ("kubelet", "must retry NodePrepareResources"),
    ("kubelet", "must not run a pod if a claim is not ready"),
    ("kubelet", "must unprepare resources for force-deleted pod"),
    ("kubelet", "must call NodePrepareResources even if not used by any container"),
    ("kubelet", "must map configs and devices to the right containers"),
    ("kubelet", "blocks new pod after force-delete"),
    ("kubelet", "DaemonSet with admin access"),
    ("kubelet", "must manage ResourceSlices"),
    ("kubelet", "supports init containers with external claims"),
    ("kubelet", "removes reservation from claim when pod is done"),
    ("kubelet", "deletes generated claims when pod is done"),
    ("kubelet", "does not delete generated claims when pod is restarting"),
    ("kubelet", "runs pod after driver starts"),
    ("kubelet", "rolling update"),
    ("kubelet", "failed update"),
    ("kubelet", "sequential update with pods replacing each other"),
    ("control plane / kubelet on single node", "supports claim and class parameters"),
    ("control plane / kubelet on single node", "supports reusing resources"),
    ("control plane / kubelet on single node", "supports sharing a claim concurrently"),
    ("control plane / kubelet on single node", "retries pod scheduling after creating device class"),
    ("control plane / kubelet on single node", "retries pod scheduling after updating device class"),
    ("control plane / kubelet on single node", "runs a pod without a generated resource claim"),
    ("control plane / kubelet on single node", "supports simple pod referencing inline resource claim"),
    ("control plane / kubelet on single node", "supports inline claim referenced by multiple containers"),
    ("control plane / kubelet on single node", "supports simple pod referencing external resource claim"),
    ("control plane / kubelet on single node", "supports external claim referenced by multiple pods"),
    (
        "control plane / kubelet on single node",
        "supports external claim referenced by multiple containers of multiple pods",
    ),
    ("control plane / kubelet on single node", "supports init containers"),
    ("control plane / kubelet on single node", "must deallocate after use"),
    ("kubelet on single node", "supports extended resources together with ResourceClaim"),
    ("multiple nodes, with different ResourceSlices", "keeps pod pending because of CEL runtime errors"),
    ("multiple nodes, with node-local resources", "uses all resources"),
    ("DRAPrioritizedList", "selects the first subrequest that can be satisfied"),
    ("DRAPrioritizedList", "uses the config for the selected subrequest"),
    ("DRAPrioritizedList", "chooses the correct subrequest subject to constraints"),
    ("DRAPrioritizedList", "filters config correctly for multiple devices"),
    ("with v1beta1 API", "supports simple ResourceClaim"),
    ("with v1beta1 API", "supports requests with alternatives"),
    ("with v1beta2 API", "supports simple ResourceClaim"),
    ("with v1beta2 API", "supports requests with alternatives"),
    ("DRAPartitionableDevices", "must consume and free up counters"),
    ("DRAConsumableCapacity", "must allow multiple allocations and consume capacity"),
    ("DRADeviceTaints", "DeviceTaint keeps pod pending"),
    ("DRADeviceTaints", "DeviceToleration enables pod scheduling"),
    ("DRADeviceTaints", "DeviceTaintRule evicts pod"),
    ("DRAExtendedResource", "must run a pod with extended resource with one container one resource"),
    ("DRAExtendedResource", "must run a pod with extended resource with one container three resources"),
    ("DRAExtendedResource", "must run a pod with extended resource with three containers one resource each"),
    (
        "DRAExtendedResource",
        "must run a pod with extended resource with three containers multiple resources each",
    ),
    ("DRAExtendedResource", "must run pods with extended resource on dra nodes and device plugin nodes"),
    ("ResourceSlice Controller", "creates slices"),
    ("control plane", "validate ResourceClaimTemplate and ResourceClaim for admin access"),
    ("control plane", "truncates the name of a generated resource claim"),
    ("control plane", "supports count/resourceclaims.resource.k8s.io ResourceQuota"),
    (
        "control plane",
        "must be possible for the driver to update the ResourceClaim.Status.Devices once allocated",
    ),
    ("control plane", "must apply per-node permission checks"),
    ("with multiple drivers (drapbv1beta1, drapbv1, both)", "work"),
)

# Why a scenario has no test yet (what draflow lacks or does differently).
NOT_COVERED: dict[tuple[str, str], str] = {
    ("kubelet", "must map configs and devices to the right containers"): (
        "no containers to exec `env` in; the CDI ids per container are unit-tested "
        "(tests/controllers/test_kubelet_dra.py)"
    ),
    ("kubelet", "DaemonSet with admin access"): "no DaemonSet kind",
    ("kubelet", "must manage ResourceSlices"): (
        "the example driver's slices are owned by their Node (tests/controllers/test_workloads_shell.py), "
        "not checked field by field"
    ),
    ("kubelet", "supports init containers with external claims"): "not tested yet (template claims are)",
    ("kubelet", "sequential update with pods replacing each other"): (
        "not tested yet: the plugin replaced while a Deployment's pods replace each other"
    ),
    ("control plane / kubelet on single node", "supports claim and class parameters"): (
        "no containers to exec `env` in; opaque config reaches the driver "
        "(tests/controllers/test_gpu_example.py)"
    ),
    ("kubelet on single node", "supports extended resources together with ResourceClaim"): "not tested yet",
    ("multiple nodes, with node-local resources", "uses all resources"): (
        "the shared e2e system has two GPUs per node; the allocator's spreading is unit-tested"
    ),
    ("DRAPrioritizedList", "selects the first subrequest that can be satisfied"): (
        "allocator conformance vectors (tests/allocator), no e2e with a second test driver"
    ),
    ("DRAPrioritizedList", "uses the config for the selected subrequest"): "needs a second test driver",
    ("DRAPrioritizedList", "chooses the correct subrequest subject to constraints"): (
        "allocator conformance vectors (tests/allocator), no e2e with a second test driver"
    ),
    ("DRAPrioritizedList", "filters config correctly for multiple devices"): "needs a second test driver",
    ("with v1beta1 API", "supports simple ResourceClaim"): "v1beta1 is converted at admission (tests/api)",
    (
        "with v1beta1 API",
        "supports requests with alternatives",
    ): "v1beta1 is converted at admission (tests/api)",
    ("with v1beta2 API", "supports simple ResourceClaim"): "v1beta2 is converted at admission (tests/api)",
    (
        "with v1beta2 API",
        "supports requests with alternatives",
    ): "v1beta2 is converted at admission (tests/api)",
    ("DRAPartitionableDevices", "must consume and free up counters"): "allocator vectors only; no e2e driver",
    ("DRAConsumableCapacity", "must allow multiple allocations and consume capacity"): (
        "allocator vectors only; no e2e driver"
    ),
    ("DRADeviceTaints", "DeviceTaint keeps pod pending"): "NoSchedule taints: scheduler tests only",
    ("DRADeviceTaints", "DeviceToleration enables pod scheduling"): "NoSchedule taints: scheduler tests only",
    ("DRAExtendedResource", "must run a pod with extended resource with one container one resource"): (
        "KEP-5004 e2e covers the mixed cluster (tests/e2e/test_extended_resources.py), not these shapes"
    ),
    ("DRAExtendedResource", "must run a pod with extended resource with one container three resources"): (
        "KEP-5004 e2e covers the mixed cluster, not this shape"
    ),
    (
        "DRAExtendedResource",
        "must run a pod with extended resource with three containers one resource each",
    ): ("KEP-5004 e2e covers the mixed cluster, not this shape"),
    (
        "DRAExtendedResource",
        "must run a pod with extended resource with three containers multiple resources each",
    ): "KEP-5004 e2e covers the mixed cluster, not this shape",
    (
        "ResourceSlice Controller",
        "creates slices",
    ): "no ResourceSlice controller library (drivers publish their own)",
    ("control plane", "must apply per-node permission checks"): (
        "NodeRestriction refuses other nodes' slices with Kubernetes' wording "
        "(tests/security/test_noderestriction.py), not the example driver's policy messages"
    ),
}


@dataclass(frozen=True)
class Marker:
    it: str
    context: str
    test: str  # path::function


def _marker_args(deco: ast.expr) -> tuple[str, str] | None:
    """``pytest.mark.upstream_e2e("It", context="...")`` -> (It, context)."""
    if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)):
        return None
    if deco.func.attr != "upstream_e2e" or not deco.args:
        return None
    first = deco.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    context = ""
    for kw in deco.keywords:
        if kw.arg == "context" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            context = kw.value.value
    return first.value, context


def markers(root: Path = ROOT) -> list[Marker]:
    """Every ``upstream_e2e`` marker of the test files under ``root/tests``."""
    found: list[Marker] = []
    for path in sorted((root / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for deco in node.decorator_list:
                    args = _marker_args(deco)
                    if args is not None:
                        rel = path.relative_to(root).as_posix()
                        found.append(Marker(args[0], args[1], f"{rel}::{node.name}"))
    return found


def scenario_of(marker: Marker) -> tuple[str, str] | None:
    """The upstream scenario a marker names (None: no such It, or ambiguous without context)."""
    matches = [s for s in UPSTREAM if s[1] == marker.it and (not marker.context or s[0] == marker.context)]
    return matches[0] if len(matches) == 1 else None


def render(found: list[Marker] | None = None) -> str:
    found = markers() if found is None else found
    tests: dict[tuple[str, str], list[str]] = {}
    for m in found:
        scenario = scenario_of(m)
        if scenario is not None:
            tests.setdefault(scenario, []).append(m.test)
    covered = sum(1 for s in UPSTREAM if s in tests)
    lines = [
        "# Kubernetes' DRA end-to-end scenarios in draflow",
        "",
        f"Generated by `python -m tests.upstream_table` from the `upstream_e2e` test markers; checked by "
        f"`tests/test_upstream_table.py`. Upstream: `{SOURCE}` in kubernetes/kubernetes (the "
        "resource.k8s.io/v1 version), one row per `It`. A covered scenario names the draflow test that "
        "mirrors it (its docstring quotes the `It` and says what it checks); the others say why not.",
        "",
        f"{covered} of {len(UPSTREAM)} scenarios covered.",
        "",
        "| context | It | covered | where / why not |",
        "|---|---|---|---|",
    ]
    for scenario in UPSTREAM:
        context, it = scenario
        where = tests.get(scenario)
        if where:
            cell = "<br>".join(f"`{t}`" for t in sorted(where))
            lines.append(f"| {context} | {it} | yes | {cell} |")
        else:
            lines.append(f"| {context} | {it} | no | {NOT_COVERED.get(scenario, 'not tested yet')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(
                f"{PAGE.relative_to(ROOT)} is out of date: run python -m tests.upstream_table",
                file=sys.stderr,
            )
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
