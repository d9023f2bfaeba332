"""Running a doc's session groups: each on a system of its own (``honcho start`` from the Procfile,
own port offset and data dir), in one shell, as a reader would (see sessions.py).

``python -m tests.docs.systems README.md:node-lifecycle`` runs one group and prints each
difference as it is found (what the test reports at the end).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infra.ports import Ports
from tests.docs.sessions import DOCS, ROOT, Block, Mismatch, Shell, new_tmp, parse_doc, run_block
from tests.e2e.honcho import VENV_BIN, HonchoSystem
from tests.helpers import free_port_offset


@dataclass(repr=False)
class Group:
    """A doc's blocks from one ``system=NAME`` to the next: one system, one shell."""

    doc: Path
    name: str
    blocks: list[Block]

    def __repr__(self) -> str:
        return f"Group({self.id})"

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.name}"

    @property
    def slow(self) -> bool:
        return "slow" in self.blocks[0].options


def groups() -> list[Group]:
    """Each doc's blocks, cut where a block starts a system (a doc's blocks before its first
    system, such as the README's quickstart, are not run here)."""
    out: list[Group] = []
    for doc in DOCS:
        current: Group | None = None
        for block in parse_doc(doc):
            if "system" in block.options:
                current = Group(doc, block.options["system"], [block])
                out.append(current)
            elif current is not None:
                current.blocks.append(block)
    return out


@dataclass
class Start:
    """``[VAR=value ...] honcho start [PROCESS ...]``: the system a doc starts."""

    variables: dict[str, str]
    processes: tuple[str, ...]


def _start_command(block: Block) -> Start | None:
    """A ```sh block whose last command is ``honcho start``, with its variables and processes."""
    if block.lang != "sh" or not block.commands:
        return None
    words = shlex.split(block.commands[-1].text.split("&&")[-1], comments=True)
    for i in range(len(words) - 1):
        if words[i : i + 2] == ["honcho", "start"] and all("=" in w for w in words[:i]):
            return Start(dict(w.split("=", 1) for w in words[:i]), tuple(words[i + 2 :]))
    return None


def _wait_for_nats(offset: int, timeout_s: float = 60) -> None:
    """A system of ``honcho start nats``: until the server takes connections."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", Ports(offset).nats), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, "nats-server never listened"
            time.sleep(0.2)


def _wait_until_ready(system: HonchoSystem, timeout_s: float = 90) -> None:
    """What a reader waits for before the first command: four Ready nodes, their slices, the
    driver's DeviceClass."""
    deadline = time.monotonic() + timeout_s
    while True:
        nodes = system.draflow("get", "nodes", "--no-headers").stdout.split("\n")
        slices = system.draflow("get", "resourceslices", "--no-headers").stdout.split("\n")
        cls = system.draflow("get", "deviceclasses", "gpu.example.com", "-o", "name")
        ready = [n for n in nodes if re.match(r"node-\d\s+Ready\b", n)]
        if len(ready) == 4 and len([s for s in slices if s.strip()]) == 4 and cls.returncode == 0:
            return
        assert time.monotonic() < deadline, f"the demo never got ready: {nodes} {slices}"
        time.sleep(0.3)


def run_group(group: Group, report: Callable[[Mismatch], None] = lambda m: None) -> list[str]:
    """Start the group's system, wait for what a reader waits for, run every block in one shell;
    the differences (each also given to ``report`` as it is found). Everything started is
    stopped, the session's directory removed."""
    tmp = new_tmp()
    first = group.blocks[0]
    system: HonchoSystem | None = None
    env: dict[str, str]
    if group.name == "none":
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DRAFLOW_", "OTEL_"))},
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    else:
        start = _start_command(first) or Start({}, ())
        data_dir = start.variables.pop("DRAFLOW_DATA_DIR", "/tmp/var")
        start.variables.pop("DRAFLOW_PORT_OFFSET", None)  # a free one: this machine is shared
        data = Path(re.sub(r"^/tmp/", f"{tmp}/", data_dir))
        offset = free_port_offset()
        system = HonchoSystem(data, start.processes, DRAFLOW_PORT_OFFSET=str(offset), **start.variables)
        env = system.env
    shell = Shell(env, tmp)
    problems = []
    try:
        if system is not None and start.processes == ("nats",):
            _wait_for_nats(offset)
        elif system is not None:
            system.wait_until_it_answers()
            _wait_until_ready(system)
        for block in group.blocks:
            if block.skipped or _start_command(block) is not None:
                continue
            for mismatch in run_block(shell, block):
                report(mismatch)
                problems.append(str(mismatch))
    finally:
        shell.close()
        if system is not None:
            system.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return problems


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the system on the way out
    wanted = set(sys.argv[1:])
    for g in groups():
        if not wanted or g.id in wanted:
            print(f"== {g.id}", flush=True)
            started = time.monotonic()
            found = run_group(g, lambda m: print(m, "\n", flush=True))
            print(f"== {g.id}: {len(found)} difference(s) in {time.monotonic() - started:.0f}s", flush=True)
