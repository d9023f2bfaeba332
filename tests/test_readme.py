"""The README's quickstart works as written.

The two fenced commands are extracted from README.md. The second (the test command) must be what
CI runs, verbatim. The first ends in ``honcho start``: that part is really run here, from the
repository's Procfile in the current venv (re-creating the venv is what CI's clean checkout does
anyway), with the data dir and NATS port of its own; the test waits until the system answers
``draflow log``, then stops it with SIGTERM and checks every process exited cleanly.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from infra.natsd import free_port

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


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
    assert names[0] == "nats" and "infra.natsd" in lines[0]


def _draflow_log(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "draflow"), "log"], env=env, capture_output=True, text=True, timeout=30
    )


def test_quickstart_system_starts_answers_and_stops_cleanly() -> None:
    start, _ = quickstart_commands()
    command = start.rsplit("&&", 1)[1].strip()
    assert command == "honcho start"
    with tempfile.TemporaryDirectory() as data_dir:
        env = {
            **os.environ,
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # `. .venv/bin/activate`
            "VIRTUAL_ENV": str(VENV_BIN.parent),
            "DRAFLOW_DATA_DIR": data_dir,
            "DRAFLOW_NATS_URL": f"nats://127.0.0.1:{free_port()}",
            "PYTHONUNBUFFERED": "1",
        }
        for var in ("DRAFLOW_STREAM", "DRAFLOW_SUBJECT_ROOT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
            env.pop(var, None)
        honcho = subprocess.Popen(
            command.split(), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        try:
            deadline = time.monotonic() + 90
            while True:
                answer = _draflow_log(env)
                if answer.returncode == 0:
                    break
                assert honcho.poll() is None, f"honcho exited early: {honcho.communicate()[0]}"
                assert time.monotonic() < deadline, f"the system never answered: {answer.stderr}"
                time.sleep(0.3)
            # the services created the event log and wrote to it
            assert answer.stdout.splitlines()[0].split()[:2] == ["SEQ", "TIME"]
            assert (Path(data_dir) / "nats" / "jetstream").is_dir()
            honcho.send_signal(signal.SIGTERM)
            output, _ = honcho.communicate(timeout=15)
        finally:
            if honcho.poll() is None:
                honcho.kill()
                honcho.communicate()
    names = [ln.split(":", 1)[0] for ln in (ROOT / "Procfile").read_text().splitlines() if ln.strip()]
    assert honcho.returncode == 143, output  # honcho's code for "stopped by SIGTERM"
    assert "SIGKILL" not in output, output
    for name in names:
        assert re.search(rf"\| {name}\.1 stopped \(rc=0\)", output), f"{name} did not exit cleanly:\n{output}"
