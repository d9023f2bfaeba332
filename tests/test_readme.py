"""The README's quickstart works as written.

The two fenced commands are extracted from README.md. The second (the test command) must be what
CI runs, verbatim. The first ends in ``honcho start``: that part is really run here, from the
repository's Procfile in the current venv (re-creating the venv is what CI's clean checkout does
anyway), with a data dir and a port offset of its own and nothing else set; the test waits until
the system answers ``draflow log``, applies a pod and traces it, then stops it as Ctrl-C does and
checks every process exited cleanly.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import free_port_offset
from tests.paths import ROOT
from tests.processes import HonchoSystem


def quickstart_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quickstart = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", quickstart, flags=re.S)]


def test_readme_has_the_two_quickstart_commands() -> None:
    start, test = quickstart_commands()
    assert start.endswith("&& honcho start"), start
    assert start.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install")
    assert test.endswith("&& pytest"), test


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    _, test = quickstart_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci, f"{test!r} is not a line of .ci/run"


def test_procfile_process_names() -> None:
    lines = [ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.strip()]
    names = [ln.split(":", 1)[0] for ln in lines]
    assert all(re.fullmatch(r"[A-Za-z0-9_]+", n) for n in names), names
    assert len(set(names)) == len(names)
    assert names[0] == "nats" and "draflow.infra.natsd" in lines[0]


POD = """apiVersion: v1
kind: Pod
metadata: {name: hello, namespace: default}
spec:
  containers: [{name: c, image: busybox}]
"""
# what a clean Ctrl-C never prints: tracebacks, and the collisions of a system that shares a port
NEVER = (
    "Traceback",
    "CancelledError",
    "KeyboardInterrupt",
    "cannot serve metrics",
    "is in use",
    "cannot export spans",
)


def test_quickstart_system_starts_answers_traces_and_stops_cleanly(tmp_path: Path) -> None:
    """``honcho start`` with nothing set but a port offset of its own (on this shared machine the
    usual ports may be taken): the CLI finds the system, a pod applied is traced right away with
    no variable set (``draflow trace`` waits for the batched spans), and Ctrl-C stops every
    process cleanly."""
    start, _ = quickstart_commands()
    command = start.rsplit("&&", 1)[1].strip()
    assert command == "honcho start"
    offset = free_port_offset()
    system = HonchoSystem(tmp_path / "data", DRAFLOW_PORT_OFFSET=str(offset))
    try:
        system.wait_until_it_answers()
        answer = system.draflow("log")
        # the services created the event log and wrote to it
        assert answer.stdout.splitlines()[0].split()[:2] == ["SEQ", "TIME"]
        assert (tmp_path / "data" / "nats" / "jetstream").is_dir()
        (tmp_path / "pod.yaml").write_text(POD)
        applied = system.draflow("apply", "-f", str(tmp_path / "pod.yaml"))
        assert applied.stdout == "pod/hello created\n", applied.stderr
        traced = system.draflow("trace", "pod", "hello")
        assert traced.returncode == 0, traced.stderr
        head, *spans = traced.stdout.splitlines()
        assert head.startswith("trace ") and "apiserver" in head, traced.stdout
        assert any(line.endswith("append Pod [producer]") for line in spans), traced.stdout
        output = system.ctrl_c()
    finally:
        system.kill()
    names = [ln.split(":", 1)[0] for ln in (ROOT / "Procfile").read_text().splitlines() if ln.strip()]
    assert "SIGKILL" not in output, output
    for name in names:
        assert re.search(rf"\| {name}\.1 stopped \(rc=0\)", output), f"{name} did not exit cleanly:\n{output}"
    for bad in NEVER:
        assert bad not in output, output
    assert f"spans to http://127.0.0.1:{4318 + offset}/v1/traces" in output  # each service found the receiver
