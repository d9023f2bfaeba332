"""What the package installs and what importing it does (issue 15, step 7: one import root).

* The wheel puts exactly one top-level import package into site-packages, ``draflow`` (no
  ``events`` or ``services`` of ours to clash with another distribution's or a user's folder),
  ships ``py.typed``, the Procfile ``draflow up`` runs and the demo manifests, and works installed
  into a fresh venv outside the checkout: ``draflow version`` and a service's ``--help`` run there.
* Importing any module of ``draflow`` has no side effects on the process: no signal handler, no
  thread, no logging or tracing configuration, no environment variable, no ``sys.path`` entry,
  nothing written to the working directory. A service installs what it needs in its own
  ``__main__`` (``tests/infra/test_early_sigterm.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.paths import ROOT

FOLDERS = ("events", "infra", "projections", "sagas", "services")

# Imports every module of draflow in a clean interpreter and prints what changed in the process.
# Third-party libraries are imported first: only what draflow's own modules do counts.
IMPORT_ALL = textwrap.dedent(
    """
    import asyncio, atexit, gc, importlib, json, logging, os, pkgutil, signal, sys, threading, warnings
    import aiohttp.web, aiosqlite, grpc, msgspec, nats, opentelemetry.trace, prometheus_client, re2, yaml

    SIGNALS = [s for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP)]
    SKIP = {"draflow.services.cli.__main__"}  # `python -m draflow.services.cli`: it runs the CLI

    def state():
        return {
            "signals": {s.name: repr(signal.getsignal(s)) for s in SIGNALS},
            "environ": dict(os.environ),
            "sys.path": list(sys.path),
            "meta_path": [type(f).__name__ for f in sys.meta_path],
            "threads": sorted(t.name for t in threading.enumerate()),
            "logging": [repr(h) for h in logging.root.handlers] + [logging.root.level],
            "loggers": sorted(n for n, lg in logging.Logger.manager.loggerDict.items()
                              if isinstance(lg, logging.Logger) and (lg.handlers or lg.level)),
            "hooks": [repr(sys.excepthook), repr(sys.displayhook), repr(threading.excepthook)],
            "streams": [id(sys.stdout), id(sys.stderr), id(sys.stdin)],
            "atexit": atexit._ncallbacks(),
            "gc": [gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()],
            "limits": [sys.getrecursionlimit(), sys.getswitchinterval()],
            "asyncio": type(asyncio.get_event_loop_policy()).__name__,
            "tracer_provider": repr(opentelemetry.trace._TRACER_PROVIDER),
            "warnings": len(warnings.filters),
            "cwd": [os.getcwd(), sorted(os.listdir("."))],
        }

    before = state()
    sys.argv[:] = ["-m"]  # as while `python -m draflow.services.x` imports its packages
    import draflow
    imported = []
    def failed(name):
        raise RuntimeError(f"cannot import {name}")
    for info in pkgutil.walk_packages(draflow.__path__, "draflow.", onerror=failed):
        if info.name not in SKIP:
            importlib.import_module(info.name)
            imported.append(info.name)
    after = state()
    print(json.dumps({
        "imported": imported,
        "changed": {k: [before[k], after[k]] for k in before if before[k] != after[k]},
    }))
    """
)


def test_importing_draflow_has_no_side_effects(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [sys.executable, "-c", IMPORT_ALL]
    run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.splitlines()[-1])
    imported = set(out["imported"])
    # the walk went everywhere, service entry points included
    assert len(imported) > 300, len(imported)
    expected = {"draflow.events.union", "draflow.infra.tracing", "draflow.services.scheduler.__main__"}
    assert expected <= imported
    assert out["changed"] == {}, json.dumps(out["changed"], indent=1)[:4000]


# -- the wheel -------------------------------------------------------------------------------------


def _source_copy(dest: Path) -> Path:
    """What the build needs (the package folders, the import root's links, pyproject, README, the
    demo manifests), copied so the build writes nothing into the checkout."""
    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in (*FOLDERS, "examples"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    shutil.copytree(ROOT / "draflow", dest / "draflow", symlinks=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built as ``pip wheel`` builds it (setuptools from this venv, no network)."""
    work = tmp_path_factory.mktemp("wheel")
    source = _source_copy(work / "src")
    build = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"),
            *("--quiet", "--wheel-dir", str(work / "dist"), str(source)),
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (built,) = (work / "dist").glob("draflow-*.whl")
    return built


def test_the_wheel_installs_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        declared = whl.read(top_level).decode().split()
        entry_points = whl.read(top_level.replace("top_level.txt", "entry_points.txt")).decode()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"draflow"} and declared == ["draflow"], (tops, declared)
    for shipped in (
        "draflow/__init__.py",
        "draflow/py.typed",
        "draflow/events/union.py",
        "draflow/services/scheduler/__main__.py",
        "draflow/services/cli/Procfile",
        "draflow/services/kubelet/podresources/v1/api_pb2.pyi",
    ):
        assert shipped in names, shipped
    assert "draflow = draflow.services.cli.main:main" in entry_points
    assert "= draflow.services.drivers.acme_gpu.controller:create_plugin" in entry_points
    # the demo manifests, for `draflow examples` and `draflow up` from an installed package
    data = [n.split("/data/", 1)[1] for n in names if "/data/share/draflow/examples/" in n]
    expected = sorted(
        f"share/draflow/examples/{p.relative_to(ROOT / 'examples')}"
        for p in (ROOT / "examples").rglob("*")
        if p.is_file()
    )
    assert sorted(data) == expected


def _fresh_venv(where: Path, wheel: Path) -> Path:
    """A new venv with the wheel installed (``pip --no-deps``); the runtime dependencies come from
    this venv's site-packages (a path entry after the new venv's own, so the wheel's ``draflow`` is
    the one found), nothing is downloaded."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    install = subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "zz_runtime_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return where


def test_the_wheel_runs_from_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    venv = _fresh_venv(tmp_path / "venv", wheel)
    assert not venv.resolve().is_relative_to(ROOT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)

    version = run(str(venv / "bin" / "draflow"), "version")
    assert version.returncode == 0 and version.stdout == "draflow 0.1.0\n", version.stdout + version.stderr
    helped = run(str(venv / "bin" / "python"), "-m", "draflow.services.kubelet", "--help")
    assert helped.returncode == 0 and "usage:" in helped.stdout and "--node" in helped.stdout, helped.stderr
    where = run(
        str(venv / "bin" / "python"),
        "-c",
        "import importlib.util, draflow, draflow.services.scheduler.__main__;"
        "print(draflow.__file__);"
        "print([f for f in ('events', 'infra', 'projections', 'sagas', 'services')"
        " if importlib.util.find_spec(f)])",
    )
    assert where.returncode == 0, where.stderr
    installed, bare = where.stdout.splitlines()
    assert Path(installed).resolve().is_relative_to(venv.resolve()), installed
    assert bare == "[]"  # nothing of ours importable by a bare folder name
