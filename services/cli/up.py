"""``draflow up``: the whole system from an installed package, from any directory, and
``draflow examples list|path``: where the demo manifests are.

``up`` runs the Procfile shipped in the package (``services/cli/Procfile``, the same file as the
checkout's ``Procfile``, which ``honcho start`` keeps reading) with honcho's process manager:
every service, its output prefixed by its name, Ctrl-C stops them all. ``--data-dir`` sets
``DRAFLOW_DATA_DIR`` (default: ``$DRAFLOW_DATA_DIR``, else ``./var``); ``--nodes N --gpus M``
replaces the four demo kubelets (and their plugins) by N kubelets with M GPUs each, each with its
gpu.example.com plugin (the first four keep the demo's node labels, and the classic drivers'
plugins where those labels ask for them); ``--port-offset`` sets
``DRAFLOW_PORT_OFFSET``. The processes run this Python (the one ``draflow`` is installed in), so no
activated venv is needed.

The examples ship with the package as data files (``<prefix>/share/draflow/examples``); in a
checkout they are the checkout's ``examples/``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import sysconfig
from importlib import resources
from pathlib import Path
from typing import Any

from draflow.infra.ports import METRICS_SLOTS
from draflow.services.cli.main import UserError

__all__ = ["examples_dir", "procfile", "register"]

_KUBELET_PREFIX = "kubelet_node_"
_PLUGIN_PREFIX = "gpu_plugin_node_"  # each kubelet's gpu.example.com plugin, its own process
# the classic drivers' plugins, on the nodes labelled for them: (Procfile name prefix, label, driver)
_CLASSIC_PLUGINS = (
    ("fpga_plugin_node_", "fpga.example.com/fabric=true", "fpga.example.com"),
    ("acme_plugin_node_", "gpu.acme.com/gpus=", "gpu.acme.com"),
    ("frob_plugin_node_", "frobnicator.example.com/frobnicators=", "frobnicator.example.com"),
)
_FIRST_KUBELET_SLOT = 11  # the Procfile's kubelets use metrics slots 11.. (past the others' slots)
_SLOT = re.compile(r"DRAFLOW_METRICS_SLOT=(\d+)")


def packaged_procfile() -> str:
    return resources.files("draflow.services.cli").joinpath("Procfile").read_text()


def _kubelet_slots(entries: list[tuple[str, str]], count: int) -> list[int]:
    """Metrics slots for ``count`` kubelets: from ``_FIRST_KUBELET_SLOT`` on, past the slots the
    other services hold (two processes on one metrics port: the second serves none)."""
    taken = {
        int(m.group(1))
        for name, cmd in entries
        if not name.startswith(_KUBELET_PREFIX) and (m := _SLOT.search(cmd))
    }
    free = [s for s in range(_FIRST_KUBELET_SLOT, METRICS_SLOTS[-1] + 1) if s not in taken]
    if count > len(free):
        raise UserError(f"--nodes {count}: expected 0 to {len(free)} (a metrics slot per kubelet)")
    return free[:count]


def procfile(nodes: int | None = None, gpus: int | None = None) -> list[tuple[str, str]]:
    """(name, command) of every process; kubelet lines replaced when ``nodes``/``gpus`` are given."""
    lines = [ln for ln in packaged_procfile().splitlines() if ln.strip() and not ln.startswith("#")]
    entries = [(name.strip(), cmd.strip()) for name, _, cmd in (ln.partition(":") for ln in lines)]
    if nodes is None and gpus is None:
        return entries
    kubelets = [(n, c) for n, c in entries if n.startswith(_KUBELET_PREFIX)]
    labels = {n: c.split("--labels ", 1)[1] for n, c in kubelets if "--labels " in c}
    count = len(kubelets) if nodes is None else nodes
    per_node = gpus if gpus is not None else 8
    slots = _kubelet_slots(entries, count)
    generated = []
    for i in range(1, count + 1):
        name = f"{_KUBELET_PREFIX}{i}"
        cmd = (
            f"DRAFLOW_METRICS_SLOT={slots[i - 1]} exec python -m draflow.services.kubelet "
            f"--node node-{i} --gpus {per_node}"
        )
        if name in labels:
            cmd += f" --labels {labels[name]}"
        generated.append((name, cmd))
        if per_node > 0:
            plugin = "exec python -m draflow.services.drivers.gpu_example.node"
            plugin += f" --node node-{i} --gpus {per_node}"
            generated.append((f"{_PLUGIN_PREFIX}{i}", plugin))
        for prefix, label, driver in _CLASSIC_PLUGINS:
            if label in labels.get(name, ""):
                classic = f"exec python -m draflow.services.drivers.classic_plugin --driver {driver}"
                generated.append((f"{prefix}{i}", f"{classic} --node node-{i}"))
    node_names = ",".join(f"node-{i}" for i in range(1, count + 1))
    out: list[tuple[str, str]] = []
    for name, cmd in entries:
        if name.startswith((_PLUGIN_PREFIX, *(prefix for prefix, _, _ in _CLASSIC_PLUGINS))):
            continue  # generated with their kubelets
        if name.startswith(_KUBELET_PREFIX):
            out.extend(generated)
            generated = []
        elif "draflow.infra.natsd" in cmd and "--nodes " in cmd:
            # the server's launcher makes these kubelets' credentials before it starts
            head, _, rest = cmd.partition("--nodes ")
            tail = rest.split(" ", 1)[1] if " " in rest else ""
            nodes_opt = f"--nodes {node_names}" if node_names else ""
            out.append((name, " ".join(x for x in (head.strip(), nodes_opt, tail) if x)))
        else:
            out.append((name, cmd))
    return out


def examples_dir() -> Path:
    """The demo manifests: the checkout's ``examples/``, else the installed data files."""
    here = Path(__file__).resolve().parents[2] / "examples"
    if here.is_dir():
        return here
    for scheme in (None, "posix_user"):
        data = Path(sysconfig.get_path("data", scheme) if scheme else sysconfig.get_path("data"))
        candidate = data / "share" / "draflow" / "examples"
        if candidate.is_dir():
            return candidate
    candidate = Path(sys.prefix) / "share" / "draflow" / "examples"
    if candidate.is_dir():
        return candidate
    raise UserError("the examples are not installed (reinstall draflow: pip install draflow)")


def register(sub: Any) -> None:
    p = sub.add_parser("up", help="run the whole system (the packaged Procfile) until Ctrl-C")
    p.add_argument(
        "--data-dir", help="where the system keeps its data (default $DRAFLOW_DATA_DIR, else ./var)"
    )
    p.add_argument("--nodes", type=int, help="number of kubelets (default: the demo's four)")
    p.add_argument("--gpus", type=int, help="GPUs per node (default 8)")
    p.add_argument("--port-offset", type=int, help="DRAFLOW_PORT_OFFSET: added to every port of the system")
    p.add_argument("--print-procfile", action="store_true", help="print the processes and exit")
    p.set_defaults(func=run_up)
    e = sub.add_parser("examples", help="the demo manifests shipped with draflow")
    e.add_argument("action", choices=("list", "path"), help="list: every manifest; path: the directory")
    e.set_defaults(func=run_examples)


def run_examples(args: argparse.Namespace) -> int:
    root = examples_dir()
    if args.action == "path":
        print(root)
        return 0
    for path in sorted(root.rglob("*")):
        if path.suffix in (".yaml", ".yml", ".json") and path.is_file():
            print(path.relative_to(root))
    return 0


def run_up(args: argparse.Namespace) -> int:
    if args.nodes is not None and args.nodes < 0:
        raise UserError(f"--nodes {args.nodes}: expected 0 or more")
    if args.gpus is not None and args.gpus < 0:
        raise UserError(f"--gpus {args.gpus}: expected 0 or more")
    processes = procfile(args.nodes, args.gpus)
    if args.print_procfile:
        for name, cmd in processes:
            print(f"{name}: {cmd}")
        return 0
    from honcho.manager import Manager
    from honcho.printer import Printer

    env = dict(os.environ)
    data_dir = Path(args.data_dir or env.get("DRAFLOW_DATA_DIR") or "var").resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    env["DRAFLOW_DATA_DIR"] = str(data_dir)
    if args.port_offset is not None:
        env["DRAFLOW_PORT_OFFSET"] = str(args.port_offset)
    # the processes run this interpreter's `python` (the environment draflow is installed in)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PYTHONUNBUFFERED", "1")
    print(
        f"draflow up: {len(processes)} processes, data in {data_dir}; kubectl: "
        f"export KUBECONFIG={data_dir / 'kubeconfig'}",
        flush=True,
    )
    manager = Manager(Printer(sys.stdout, colour=sys.stdout.isatty()))
    for name, cmd in processes:
        manager.add_process(name, cmd, env=env)
    manager.loop()
    return int(manager.returncode or 0)
