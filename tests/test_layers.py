"""The layers of the tree, checked (issue 15; DESIGN.md "Layout"): which package may import which.

Reads the imports of every module of ``events``, ``infra``, ``projections``, ``sagas`` and
``services`` (every import statement, also inside functions and under ``TYPE_CHECKING``: a lazy
import is still a dependency) and fails on a forbidden edge:

* ``events`` (the schema) imports nothing of ours but ``events``;
* ``services/dra`` (the DRA rules every service shares) imports only ``events``;
* ``infra``, ``projections`` and ``sagas`` (the engine, saga state and view) import no service;
* ``services/runtime`` (the client side) imports ``events``, ``infra``, ``projections``,
  ``sagas`` and ``services/dra``, no service;
* a service imports ``services/dra``, ``services/runtime``, ``sagas``, ``infra``, ``events`` and
  ``projections`` (and itself), never another service, except the named exceptions in
  :data:`EXCEPTIONS`.

And the pure modules (the DRA rules, the deciders, the reducers, saga decisions) load no I/O
library when imported (what ``tests/classic/test_purity.py`` checked for the classic deciders).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("events", "infra", "projections", "sagas", "services")
SHARED = ("services.dra", "services.runtime")

# Service -> the other services it may import, and why. Nothing else crosses between services.
EXCEPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "services.cli": (
        ("*",),
        "the operator's tool: it talks to the apiserver, and verify-replay / explain re-run the "
        "services' own deciders (scheduler, claim controller, quota, node lifecycle) on a log",
    ),
    "services.kubelet": (
        ("services.drivers",),
        "the kubelet hosts the example drivers' node plugins in-process, as a node runs them",
    ),
}

# Beyond services/dra: modules that must stay pure (no NATS, SQLite, gRPC, tracing, metrics).
PURE = (
    "events.codec",
    "events.union",
    "events.api.classic_pod",
    "projections.objects",
    "sagas.state",
    "sagas.view",
    "services.claim_controller.controller",
    "services.driver_controller.controller",
    "services.driver_controller.sagas",
    "services.drivers.acme_gpu",
    "services.drivers.fpga_example",
    "services.kubelet.admission",
    "services.kubelet.classic_admission",
    "services.quota_reconciler.reconcile",
    "services.scheduler.framework",
    "services.scheduler.plugins",
    "services.scheduler.plugins.classic.plugin",
    "services.scheduler.plugins.classic.scheduling",
    "services.scheduler.plugins.classic.writes",
    "services.workloads.deployment",
)
IO_LIBRARIES = ("nats", "sqlite3", "aiosqlite", "grpc", "opentelemetry", "prometheus_client", "infra")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str) -> set[str]:
    """Every module (or module attribute) ``path`` imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names)
    return out


def scan(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """Module name -> what it imports of ours, for every module of ``packages`` under ``root``."""
    ours = tuple(packages)
    graph: dict[str, set[str]] = {}
    for package in ours:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(path, root)
            graph[module] = {m for m in imports_of(path, module) if m.split(".")[0] in ours}
    return graph


def layer(module: str) -> str:
    """``events``, ``infra``, ``projections``, ``sagas``, ``services`` (the package itself),
    ``services.dra``, ``services.runtime`` or ``services.<name>``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "services" and len(parts) > 1 else parts[0]


def _allowed(importer: str, imported: str) -> bool:
    if imported in (importer, "services"):  # itself; the services package's __init__
        return True
    if importer == "events":
        return False
    if importer == "services.dra":
        return imported == "events"
    if importer in ("infra", "projections", "sagas"):
        return not imported.startswith("services")
    if importer in ("services", "services.runtime"):
        return not imported.startswith("services.") or imported == "services.dra"
    # a service
    if not imported.startswith("services.") or imported in SHARED:
        return True
    allowed, _ = EXCEPTIONS.get(importer, ((), ""))
    return "*" in allowed or imported in allowed


def violations(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """The forbidden edges, one line per module and forbidden layer: ``module -> imported (rule)``."""
    worst: dict[tuple[str, str], str] = {}
    for module, targets in graph.items():
        for target in targets:
            src, dst = layer(module), layer(target)
            if not _allowed(src, dst):
                key = (module, dst)
                worst[key] = min(worst.get(key, target), target)
    return [f"{m} -> {t} ({layer(m)} may not import {dst})" for (m, dst), t in sorted(worst.items())]


def test_the_tree_keeps_its_layers() -> None:
    graph = scan(ROOT)
    assert len(graph) > 300 and "services.dra.resourceclaim" in graph  # the scan found the tree
    found = violations(graph)
    assert not found, "forbidden imports:\n" + "\n".join(found)


def test_every_exception_is_still_needed() -> None:
    """A named exception nobody uses any more is removed, not kept as a loophole."""
    graph = scan(ROOT)
    for importer, (allowed, why) in EXCEPTIONS.items():
        assert why
        used = {
            layer(t)
            for m, targets in graph.items()
            if layer(m) == importer
            for t in targets
            if layer(t).startswith("services.") and layer(t) not in (importer, *SHARED)
        }
        assert used, f"{importer}: no longer imports another service; drop its exception"
        assert "*" in allowed or used <= set(allowed), (importer, used)


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:  # every folder a package
        for folder in [root / package, *(p for p in (root / package).rglob("*") if p.is_dir())]:
            if folder.is_dir() and not (folder / "__init__.py").exists():
                (folder / "__init__.py").write_text("")
    return root


def test_a_sideways_import_fails_the_check(tmp_path: Path) -> None:
    """The checker itself: a tree like ours with one forbidden edge of each kind is refused,
    line by line; the same tree without them passes."""
    clean = {
        "events/dra.py": "from events.envelope import Event\n",
        "events/envelope.py": "",
        "infra/store.py": "import events.dra\n",
        "projections/fold.py": "from events import dra\n",
        "sagas/engine.py": "from infra.store import *\n",
        "services/dra/rules.py": "from events.dra import Event\n",
        "services/runtime/client.py": "from services.dra import rules\nfrom infra import store\n",
        "services/scheduler/plugin.py": (
            "from services.dra.rules import Event\nfrom services.runtime import client\nfrom . import queue\n"
        ),
        "services/scheduler/queue.py": "",
        "services/kubelet/main.py": "from services.drivers.gpu import plugin\n",
        "services/drivers/gpu/plugin.py": "from services.dra.rules import Event\n",
        "services/cli/verify.py": "def run():\n    from services.scheduler.plugin import Event\n",
    }
    assert violations(scan(_tree(tmp_path / "clean", clean))) == []

    sideways = {
        **clean,
        # a service reaching into another one (here lazily, inside a function)
        "services/scheduler/plugin.py": clean["services/scheduler/plugin.py"]
        + "def f():\n    from services.kubelet.main import x\n",
        # the shared rules depending on the client side, the schema on a service
        "services/dra/rules.py": "from events.dra import Event\nfrom services.runtime.client import c\n",
        "events/dra.py": "from events.envelope import Event\nimport services.scheduler.queue\n",
        # the engine importing a saga definition's service; a driver importing the kubelet
        "sagas/engine.py": "from ..services.scheduler import plugin\n",
        "services/drivers/gpu/plugin.py": "from services.kubelet import main\n",
    }
    assert violations(scan(_tree(tmp_path / "sideways", sideways))) == [
        "events.dra -> services.scheduler.queue (events may not import services.scheduler)",
        "sagas.engine -> services.scheduler (sagas may not import services.scheduler)",
        "services.dra.rules -> services.runtime.client (services.dra may not import services.runtime)",
        "services.drivers.gpu.plugin -> services.kubelet (services.drivers may not import services.kubelet)",
        "services.scheduler.plugin -> services.kubelet.main "
        "(services.scheduler may not import services.kubelet)",
    ]


def _all_dra_modules() -> list[str]:
    return [module_name(p, ROOT) for p in sorted((ROOT / "services" / "dra").rglob("*.py"))]


def test_pure_modules_import_no_io_libraries() -> None:
    """Importing the DRA rules and the deciders loads no NATS, SQLite, gRPC, tracing or metrics
    code (only what these imports add counts: a coverage run's own data file, SQLite, is loaded
    before)."""
    modules = [*_all_dra_modules(), *PURE]
    code = (
        "import sys\n"
        + "before = set(sys.modules)\n"
        + "".join(f"import {m}\n" for m in modules)
        + f"io = {IO_LIBRARIES!r}\n"
        + "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in io))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
