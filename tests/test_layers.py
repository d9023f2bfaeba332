"""The layers of the tree, checked (issue 15; docs/architecture.md): which package may import which.

Reads the imports of every module of ``draflow`` (the folders ``events``, ``infra``,
``projections``, ``sagas`` and ``services``: every import statement, also inside functions and
under ``TYPE_CHECKING``: a lazy import is still a dependency) and fails on a forbidden edge:

* ``draflow.events`` (the schema) imports nothing of ours but ``draflow.events``;
* ``draflow.services.dra`` (the DRA rules every service shares) imports only ``draflow.events``;
* ``draflow.infra``, ``draflow.projections`` and ``draflow.sagas`` (the engine, saga state and
  view) import no service;
* ``draflow.services.runtime`` (the client side) imports the engine layers and
  ``draflow.services.dra``, no service;
* a service (``draflow.services.<name>``) imports ``draflow.services.dra``,
  ``draflow.services.runtime``, the engine layers and itself, never another service, except the
  named exceptions in :data:`EXCEPTIONS`.

There is one import root: nothing (the product, the tests, the benchmarks, the docs' commands)
names a folder by its bare name (``import <folder>``, a ``-m <folder>.x`` argv, a patch target
``"<folder>.x.y"``): both names would load the same file twice, as two modules, with two copies
of every msgspec Struct class (``isinstance`` and tagged-union decoding then fail silently).
``tests/conftest.py`` also refuses such an import at run time.

And the pure modules (the DRA rules, the deciders, the reducers, saga decisions) load no I/O
library when imported.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.paths import ROOT

TOP = "draflow"
FOLDERS = ("events", "infra", "projections", "sagas", "services")  # the repository's top-level folders
SERVICES = f"{TOP}.services"
SHARED = (f"{SERVICES}.dra", f"{SERVICES}.runtime")

# Service -> the other services it may import, and why. Nothing else crosses between services.
EXCEPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    f"{SERVICES}.cli": (
        ("*",),
        "the operator's tool: it talks to the apiserver, and verify-replay / explain re-run the "
        "services' own deciders (scheduler, claim controller, quota, node lifecycle) on a log",
    ),
    f"{SERVICES}.kubelet": (
        (f"{SERVICES}.drivers",),
        "the kubelet writes the device plugin's CDI specs with the drivers' CDI helper, labels the "
        "Node with gpu.example.com's label name, checkpoints with the classic drivers' JSON helper, "
        "and hosts KEP-4381's frobnicator node plugin (its capacity report has no gRPC API; every "
        "other driver's node side is a plugin process)",
    ),
}

# Beyond services/dra: modules that must stay pure (no NATS, SQLite, gRPC, tracing, metrics).
PURE = (
    "draflow.events.codec",
    "draflow.events.union",
    "draflow.events.api.classic_pod",
    "draflow.projections.objects",
    "draflow.sagas.state",
    "draflow.sagas.view",
    "draflow.services.claim_controller.controller",
    "draflow.services.claim_controller.numeric",
    "draflow.services.device_taint_eviction.planner",
    "draflow.services.driver_controller.controller",
    "draflow.services.driver_controller.sagas",
    "draflow.services.drivers.acme_gpu",
    "draflow.services.drivers.fpga_example",
    "draflow.services.kubelet.admission",
    "draflow.services.kubelet.backoff",
    "draflow.services.kubelet.containers",
    "draflow.services.kubelet.classic_admission",
    "draflow.services.kubelet.devicehealth",
    "draflow.services.quota_reconciler.reconcile",
    "draflow.services.scheduler.autoscaler",
    "draflow.services.scheduler.framework",
    "draflow.services.scheduler.plugins",
    "draflow.services.scheduler.plugins.classic.plugin",
    "draflow.services.scheduler.plugins.classic.scheduling",
    "draflow.services.scheduler.plugins.classic.writes",
    "draflow.services.scheduler.plugins.numeric.books",
    "draflow.services.scheduler.plugins.numeric.plugin",
    "draflow.services.runtime.programs",
    "draflow.services.workloads.deployment",
    "draflow.services.workloads.job",
)
IO_LIBRARIES = (
    *("nats", "sqlite3", "aiosqlite", "grpc", "opentelemetry", "prometheus_client"),
    f"{TOP}.infra",
)


def module_name(path: Path, root: Path) -> str:
    """``<root>/services/x/y.py`` -> ``draflow.services.x.y``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([TOP, *parts])


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


def scan(root: Path, folders: Iterable[str] = FOLDERS) -> dict[str, set[str]]:
    """Module name -> what it imports of ours, for every module of ``folders`` under ``root``."""
    graph: dict[str, set[str]] = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            module = module_name(path, root)
            graph[module] = {m for m in imports_of(path, module) if m.split(".")[0] == TOP}
    return graph


def layer(module: str) -> str:
    """``draflow.events``, ``draflow.infra``, ``draflow.projections``, ``draflow.sagas``,
    ``draflow.services`` (the package itself), ``draflow.services.dra``,
    ``draflow.services.runtime`` or ``draflow.services.<name>``; ``draflow`` itself."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[1:2] == ["services"] and len(parts) > 2 else ".".join(parts[:2])


def _allowed(importer: str, imported: str) -> bool:
    if imported in (importer, SERVICES, TOP):  # itself; the services package's and draflow's __init__
        return True
    if importer == f"{TOP}.events":
        return False
    if importer == f"{SERVICES}.dra":
        return imported == f"{TOP}.events"
    if importer in (f"{TOP}.infra", f"{TOP}.projections", f"{TOP}.sagas"):
        return not imported.startswith(SERVICES)
    if importer in (SERVICES, f"{SERVICES}.runtime"):
        return not imported.startswith(f"{SERVICES}.") or imported == f"{SERVICES}.dra"
    # a service
    if not imported.startswith(f"{SERVICES}.") or imported in SHARED:
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
    assert len(graph) > 300 and f"{SERVICES}.dra.resourceclaim" in graph  # the scan found the tree
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
            if layer(t).startswith(f"{SERVICES}.") and layer(t) not in (importer, *SHARED)
        }
        assert used, f"{importer}: no longer imports another service; drop its exception"
        assert "*" in allowed or used <= set(allowed), (importer, used)


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in FOLDERS:  # every folder a package
        for d in [root / folder, *(p for p in (root / folder).rglob("*") if p.is_dir())]:
            if d.is_dir() and not (d / "__init__.py").exists():
                (d / "__init__.py").write_text("")
    return root


def test_a_sideways_import_fails_the_check(tmp_path: Path) -> None:
    """The checker itself: a tree like ours with one forbidden edge of each kind is refused,
    line by line; the same tree without them passes."""
    d = TOP  # the synthetic modules' sources name the import root
    clean = {
        "events/dra.py": f"from {d}.events.envelope import Event\n",
        "events/envelope.py": "",
        "infra/store.py": f"import {d}.events.dra\n",
        "projections/fold.py": f"from {d}.events import dra\n",
        "sagas/engine.py": f"from {d}.infra.store import *\n",
        "services/dra/rules.py": f"from {d}.events.dra import Event\n",
        "services/runtime/client.py": f"from {d}.services.dra import rules\nfrom {d}.infra import store\n",
        "services/scheduler/plugin.py": (
            f"from {d}.services.dra.rules import Event\n"
            f"from {d}.services.runtime import client\nfrom . import queue\n"
        ),
        "services/scheduler/queue.py": "",
        "services/kubelet/main.py": f"from {d}.services.drivers.gpu import plugin\n",
        "services/drivers/gpu/plugin.py": f"from {d}.services.dra.rules import Event\n",
        "services/cli/verify.py": f"def run():\n    from {d}.services.scheduler.plugin import Event\n",
    }
    assert violations(scan(_tree(tmp_path / "clean", clean))) == []

    sideways = {
        **clean,
        # a service reaching into another one (here lazily, inside a function)
        "services/scheduler/plugin.py": clean["services/scheduler/plugin.py"]
        + f"def f():\n    from {d}.services.kubelet.main import x\n",
        # the shared rules depending on the client side, the schema on a service
        "services/dra/rules.py": (
            f"from {d}.events.dra import Event\nfrom {d}.services.runtime.client import c\n"
        ),
        "events/dra.py": f"from {d}.events.envelope import Event\nimport {d}.services.scheduler.queue\n",
        # the engine importing a saga definition's service; a driver importing the kubelet
        "sagas/engine.py": "from ..services.scheduler import plugin\n",
        "services/drivers/gpu/plugin.py": f"from {d}.services.kubelet import main\n",
    }
    assert violations(scan(_tree(tmp_path / "sideways", sideways))) == [
        f"{d}.events.dra -> {d}.services.scheduler.queue "
        f"({d}.events may not import {d}.services.scheduler)",
        f"{d}.sagas.engine -> {d}.services.scheduler ({d}.sagas may not import {d}.services.scheduler)",
        f"{d}.services.dra.rules -> {d}.services.runtime.client "
        f"({d}.services.dra may not import {d}.services.runtime)",
        f"{d}.services.drivers.gpu.plugin -> {d}.services.kubelet "
        f"({d}.services.drivers may not import {d}.services.kubelet)",
        f"{d}.services.scheduler.plugin -> {d}.services.kubelet.main "
        f"({d}.services.scheduler may not import {d}.services.kubelet)",
    ]


# -- one import root: the folders are never imported by their bare names ---------------------------

_BARE = re.compile(rf"(?<![\w./-])((?:{'|'.join(FOLDERS)})(?:\.[A-Za-z_]\w*)+)")


def our_modules(root: Path) -> set[str]:
    """``<folder>.<module>`` for every module and package of the folders (the first two parts:
    what a bare reference would name)."""
    out = set()
    for folder in FOLDERS:
        for path in (root / folder).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if len(parts) >= 2:
                out.add(".".join(parts[:2]) if parts[1] != "__init__" else parts[0])
    return out


def bare_references(path: Path, ours: set[str], root: Path = ROOT) -> list[str]:
    """``path:line: what`` for every bare import of a folder and every string (Python) or line
    (any other file) naming a module of ours by its bare name."""
    text = path.read_text()
    where = path.relative_to(root)
    found: list[tuple[int, str]] = []
    if path.suffix != ".py":
        for n, line in enumerate(text.splitlines(), 1):
            found += [(n, m) for m in _BARE.findall(line) if ".".join(m.split(".")[:2]) in ours]
        return [f"{where}:{n}: {what}" for n, what in found]
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] in FOLDERS]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found += [(node.lineno, node.module)] if node.module.split(".")[0] in FOLDERS else []
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [m for m in _BARE.findall(node.value) if ".".join(m.split(".")[:2]) in ours]
            found += [(node.lineno, repr(m)) for m in names]
    return [f"{where}:{n}: {what}" for n, what in sorted(found)]


def _checked_files(root: Path) -> list[Path]:
    """The product, the tests and the benchmarks (Python), and every file that starts a process or
    tells a user how to: README, docs, Procfiles, pyproject.toml, CI scripts. Recorded test data
    is data. ``draflow/`` is only its ``__init__.py``: the rest are links to the folders."""
    python = [p for d in (*FOLDERS, "tests", "bench") for p in (root / d).rglob("*.py")]
    python = [p for p in python if p.relative_to(root).parts[:2] != ("tests", "data")]
    text = [root / "README.md", root / "pyproject.toml", *(root / "docs").glob("*.md")]
    text += [*root.glob("Procfile*"), *(root / "services" / "cli").glob("Procfile*")]
    text += list((root / ".ci").glob("*"))
    return sorted(p for p in {*python, root / TOP / "__init__.py", *text} if p.is_file())


def test_nothing_names_a_folder_by_its_bare_name() -> None:
    ours = our_modules(ROOT)
    assert {".".join(("services", "scheduler")), ".".join(("events", "codec"))} <= ours
    files = _checked_files(ROOT)
    assert len(files) > 600 and ROOT / "tests" / "conftest.py" in files and ROOT / "Procfile" in files
    found = [ref for path in files for ref in bare_references(path, ours)]
    assert not found, f"bare names (write {TOP}.<name>):\n" + "\n".join(found)


def test_a_bare_name_fails_the_check(tmp_path: Path) -> None:
    """The bare-name check itself, on a small tree: a bare import, a bare patch target, a bare
    ``-m`` in a subprocess argv and in a Procfile are found; ``events.k8s.io`` (no module of ours)
    and the prefixed names are not."""
    e, s = "events", "services"  # built, so this file holds no bare name itself
    (tmp_path / e).mkdir()
    (tmp_path / e / "codec.py").write_text("")
    (tmp_path / s / "cli").mkdir(parents=True)
    (tmp_path / s / "cli" / "__init__.py").write_text("")
    ours = our_modules(tmp_path)
    assert ours == {f"{e}.codec", f"{s}.cli"}
    code = tmp_path / "t.py"
    code.write_text(
        f"import {e}.codec\nfrom {s}.cli import x\nfrom {TOP}.{e}.codec import y\n"
        f"patch('{e}.codec.decode')\nrun(['-m', '{s}.cli'])\nkind = '{e}.k8s.io'\n"
    )
    procfile = tmp_path / "Procfile"
    procfile.write_text(f"a: python -m {s}.cli\nb: python -m {TOP}.{s}.cli\n")
    refs = bare_references(code, ours, tmp_path) + bare_references(procfile, ours, tmp_path)
    assert refs == [
        f"t.py:1: {e}.codec",
        f"t.py:2: {s}.cli",
        f"t.py:4: '{e}.codec.decode'",
        f"t.py:5: '{s}.cli'",
        f"Procfile:1: {s}.cli",
    ]


def test_a_bare_import_is_refused_at_run_time() -> None:
    """tests/conftest.py's finder: what the static check cannot see (a name built at run time)."""
    import importlib

    for folder in FOLDERS:
        assert folder not in sys.modules
        with pytest.raises(ModuleNotFoundError, match=rf"imported as '{TOP}\.{folder}'"):
            importlib.import_module(folder)
    assert importlib.import_module(f"{TOP}.events").__name__ == f"{TOP}.events"


# -- purity ----------------------------------------------------------------------------------------


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
        + "new = set(sys.modules) - before\n"
        + "print(sorted(m for m in new if any(m == i or m.startswith(i + '.') for i in io)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


# -- docs/architecture.md says the same ------------------------------------------------------------

_BASE = (
    *("draflow.events", "draflow.infra", "draflow.projections", "draflow.sagas"),
    *("draflow.services.dra", "draflow.services.runtime"),
)


def _table(text: str, after: str) -> list[list[str]]:
    """The rows (cells, backticks and trailing slashes dropped) of the first table after ``after``."""
    lines = text.split(after, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip().replace("`", "").rstrip("/") for c in line.strip("|").split("|")])
    return rows


def _full(folder: str) -> str:
    """``services/dra`` (the page names folders) -> ``draflow.services.dra``."""
    return f"{TOP}.{folder.strip().replace('/', '.')}"


def _layers(cell: str) -> list[str]:
    """``events, services/dra; no service`` -> ``["draflow.events", "draflow.services.dra"]``."""
    names = [n.strip() for n in cell.split(";")[0].split(",")]
    return [_full(n) for n in names if n and n not in ("nothing of ours", "itself")]


def test_the_architecture_page_states_these_rules() -> None:
    """docs/architecture.md's import table, its named exceptions and its map of the services are
    the rules and the tree this module checks: the page cannot drift from them."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    services = sorted(
        f"services/{p.parent.name}"
        for p in (ROOT / "services").glob("*/__init__.py")
        if p.parent.name not in ("dra", "runtime")
    )
    mapped = {row[0] for row in _table(text, "## The package map")}
    mapped |= {row[0] for row in _table(text, "The components, one process each")}
    assert [s for s in services if s not in mapped] == [], "services missing from the package map"

    rules = _table(text, "## Which package may import which")
    assert rules, "no import table"
    someone = f"{SERVICES}.someservice"
    for importers, allowed in rules:
        for importer in [_full(i) for i in importers.split(",")]:
            importer = someone if importer == f"{SERVICES}.<name>" else importer
            may = set(_layers(allowed))
            for target in (*_BASE, f"{SERVICES}.other"):
                want = target in may or target == importer
                assert _allowed(importer, target) == want, (importer, target, want)

    exceptions = {_full(row[0]): row[1] for row in _table(text, "Named exceptions")}
    assert exceptions.keys() == EXCEPTIONS.keys()
    for importer, cell in exceptions.items():
        named, _ = EXCEPTIONS[importer]
        assert (("*",) if cell == "any service" else (_full(cell),)) == named, importer
