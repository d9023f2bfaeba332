"""Every console session of README.md and docs/*.md runs against a real system and prints what the
doc shows (tests/docs/sessions.py says how a doc steers it), so the docs cannot drift.

Each group of blocks (a doc's blocks from one ``<!-- session: system=NAME -->`` to the next) gets
its own ``honcho start`` from the repository's Procfile, with its own port offset and data dir,
and one shell that runs the blocks in order as a reader would.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.sessions import DOCS, ROOT, Block, Shell, matches, new_tmp, parse_doc, run_block
from tests.e2e.honcho import VENV_BIN, HonchoSystem
from tests.helpers import free_port_offset

MAX_SKIPPED = 2  # console sessions that cannot run here (each says why in its doc)


@dataclass
class Group:
    doc: Path
    name: str
    blocks: list[Block]

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.name}"

    @property
    def slow(self) -> bool:
        return "slow" in self.blocks[0].options


def groups() -> list[Group]:
    """Each doc's blocks, cut where a block starts a system; blocks before the first are none's."""
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


def test_every_console_session_is_run_or_says_why_not() -> None:
    covered = {id(b) for g in groups() for b in g.blocks}
    sessions = [b for doc in DOCS for b in parse_doc(doc) if b.lang == "console"]
    assert len(sessions) >= 28
    assert [b.where for b in sessions if id(b) not in covered] == []
    skipped = [f"{b.where} ({b.options['skip']})" for b in sessions if b.skipped]
    assert len(skipped) <= MAX_SKIPPED, skipped
    for b in sessions:
        assert b.commands, f"{b.where}: a console block without a `$ ` command"


def _start_command(block: Block) -> dict[str, str] | None:
    """A ```sh block whose last command is ``[VAR=value ...] honcho start``: its variables."""
    if block.lang != "sh" or not block.commands:
        return None
    last = block.commands[-1].text.split("&&")[-1]
    words = shlex.split(last, comments=True)
    if words[-2:] != ["honcho", "start"]:
        return None
    return dict(w.split("=", 1) for w in words[:-2])


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


def _session(group: Group) -> None:
    tmp = new_tmp()
    first = group.blocks[0]
    system: HonchoSystem | None = None
    env: dict[str, str]
    if group.name == "none":
        import os

        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DRAFLOW_", "OTEL_"))},
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    else:
        variables = _start_command(first) or {}
        data_dir = variables.pop("DRAFLOW_DATA_DIR", "/tmp/var")
        variables.pop("DRAFLOW_PORT_OFFSET", None)  # a free one: this machine is shared
        data = Path(re.sub(r"^/tmp/", f"{tmp}/", data_dir))
        system = HonchoSystem(data, DRAFLOW_PORT_OFFSET=str(free_port_offset()), **variables)
        env = system.env
    shell = Shell(env, tmp)
    problems = []
    try:
        if system is not None:
            system.wait_until_it_answers()
            _wait_until_ready(system)
        for block in group.blocks:
            if block.skipped or _start_command(block) is not None:
                continue
            problems += [str(m) for m in run_block(shell, block)]
    finally:
        shell.close()
        if system is not None:
            system.kill()
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize(
    "group",
    [pytest.param(g, id=g.id, marks=[pytest.mark.slow] if g.slow else []) for g in groups()],
)
def test_doc_sessions(group: Group) -> None:
    _session(group)


# ---------------------------------------------------------------------------------------------
# The harness itself


def test_matching_normalises_volatile_parts_and_elides() -> None:
    shown = [
        "NAME             STATE                AGE   DEVICES",
        "pod0-gpu-r7sj6   allocated,reserved   4s    gpu.example.com/node-1/gpu-0",
        "…",
        "  Creation Timestamp:  2026-11-22T03:24:53Z",
        "scheduler-b-ps-75a6ebbf-…-79  done in 0.02s",
    ]
    printed = [
        "NAME             STATE                AGE     DEVICES",
        "pod0-gpu-zsl7l   allocated,reserved   2m10s   gpu.example.com/node-1/gpu-0",
        "pod1-gpu-nbqmf   allocated,reserved   2m10s   gpu.example.com/node-1/gpu-1",
        "  Creation Timestamp:  2026-11-25T14:21:34Z",
        "scheduler-b-ps-ddb1a5a9-…-30  done in 1.25s",
    ]
    assert matches(shown, printed)
    assert not matches(shown, [*printed[:1], printed[1].replace("node-1/gpu-0", "node-2/gpu-0"), *printed[2:]])
    assert not matches(shown[:2], printed[:3])  # an extra line is a difference without `…`
    assert not matches(["pod/pod0 created"], ["pod/pod0 unchanged"])
    assert matches(["x: 42 of 7"], ["x: 3 of 9"], {"numbers"})
    assert matches(["b", "a"], ["a", "b"], {"order"})


def test_parsing_commands_continuations_and_directives(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- session: system=demo slow vary=numbers|nodes -->\n\n"
        "```console\n"
        "$ draflow apply -f a.yaml \\\n  -f b.yaml   # two files\n"
        "pod/a created\n"
        "$ echo '{\"a\":\n  1}' | draflow apply -f -\n"
        "$ python -m services.kubelet --node n &\n"
        "$ cat <<EOF\n"
        "x\n"
        "EOF\n"
        "x\n"
        "```\n\n"
        "<!-- session: skip (needs a Jaeger) -->\n"
        "```console\n$ draflow trace pod p -o jaeger\n```\n"
    )
    first, second = parse_doc(doc)
    assert first.options == {"system": "demo", "slow": "", "vary": "numbers|nodes"}
    assert first.vary == {"numbers", "nodes"}
    assert [c.text for c in first.commands] == [
        "draflow apply -f a.yaml \\\n  -f b.yaml   # two files",
        "echo '{\"a\":\n  1}' | draflow apply -f -",
        "python -m services.kubelet --node n &",
        "cat <<EOF\nx\nEOF",
    ]
    assert first.commands[0].expected == ["pod/a created"]
    assert first.commands[3].expected == ["x"]
    assert [c.background for c in first.commands] == [False, False, True, False]
    assert second.skipped and second.options["skip"] == "needs a Jaeger"


def test_a_shell_keeps_its_state_and_the_docs_tmp_is_its_own() -> None:
    import os

    tmp = new_tmp()
    shell = Shell(dict(os.environ), tmp)
    try:
        assert shell.run("cd examples && X=1")[0] == 0
        assert shell.run("pwd; echo $X")[1] == [str(ROOT / "examples"), "1"]
        assert shell.run("mkdir /tmp/at-61 && ls -d /tmp/at-61; echo oops >&2; false")[0] == 1
        assert (tmp / "at-61").is_dir()
        assert shell.run("ls -d /tmp/at-61")[1] == ["/tmp/at-61"]
    finally:
        shell.close()
