"""What a simulated container does once started: how long it runs and the code it exits with.

draflow's kubelets run no processes. So that pods can finish, fail and restart as on a real node,
each container gets a *program* — a run time and an exit code — read from, in this order:

1. the pod annotation ``run.draflow.io/<container name>``: a script in the small shell subset
   below (``"sleep 1; exit 1"``);
2. the container's ``command`` + ``args`` when the simulation understands them: ``true``,
   ``false``, ``sleep N``, or ``sh -c SCRIPT`` / ``bash -c SCRIPT`` with a script in the subset
   (upstream's e2e pods: ``["true"]``, ``["sh", "-c", "sleep 1; exit 1"]``);
3. the pod annotation ``workloads.draflow.io/run-seconds: N`` (the workloads controller puts it
   on a Job's pods): run N seconds, exit 0;
4. otherwise the container runs until the pod is stopped (a server, ``pause``, or a command the
   simulation does not understand, such as the examples' ``trap 'exit 0' TERM; sleep 9999 & wait``).

The shell subset: statements separated by ``;``, ``&&``, ``||`` or newlines; ``true`` and ``:``
(status 0), ``false`` (status 1), ``sleep N`` (seconds; ``s``/``m``/``h``/``d`` suffixes;
``infinity``), ``exit [N]``. Every statement of a script must be understood, else the script is
not (rule 4 applies). Pure: the kubelet and the workloads controller share it.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass

from draflow.events.api.core_v1 import Container, Pod

__all__ = [
    "RUN_ANNOTATION_PREFIX",
    "RUN_SECONDS_ANNOTATION",
    "Program",
    "parse_command",
    "parse_script",
    "program_of",
]

RUN_ANNOTATION_PREFIX = "run.draflow.io/"
RUN_SECONDS_ANNOTATION = "workloads.draflow.io/run-seconds"

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh"})
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SLEEP = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)([smhd]?)$")
_SEPARATORS = re.compile(r"(&&|\|\||;|\n)")


@dataclass(frozen=True, slots=True)
class Program:
    """``run_s`` seconds, then exit ``exit_code``; ``run_s`` None: runs until stopped."""

    run_s: float | None
    exit_code: int = 0

    @property
    def forever(self) -> bool:
        return self.run_s is None


FOREVER = Program(run_s=None)


def _statement(words: list[str], status: int) -> tuple[float | None, int, bool] | None:
    """(seconds, status, exits) for one simple command, None when not understood; seconds None:
    never returns."""
    if not words:
        return 0.0, status, False
    name, rest = words[0].rsplit("/", 1)[-1], words[1:]
    if name in ("true", ":") and not rest:
        return 0.0, 0, False
    if name == "false" and not rest:
        return 0.0, 1, False
    if name == "exit" and len(rest) <= 1:
        if not rest:
            return 0.0, status, True
        return (0.0, int(rest[0]) & 0xFF, True) if rest[0].lstrip("-").isdigit() else None
    if name == "sleep" and rest:
        total = 0.0
        for arg in rest:
            if arg in ("inf", "infinity"):
                return None, 0, False
            m = _SLEEP.match(arg)
            if m is None:
                return None
            total += float(m.group(1)) * _UNITS[m.group(2)]
        return total, 0, False
    return None


def parse_script(script: str) -> Program | None:
    """The program a shell script amounts to, or None when a statement is not understood."""
    parts = _SEPARATORS.split(script)
    elapsed = 0.0
    status = 0
    skip = False  # the statement after a failed && (or a successful ||) is not run
    op = ";"
    for i, part in enumerate(parts):
        if i % 2 == 1:
            op = part
            continue
        try:
            words = shlex.split(part, comments=True)
        except ValueError:
            return None
        if op == "&&":
            skip = status != 0
        elif op == "||":
            skip = status == 0
        else:
            skip = False
        result = _statement(words, status)
        if result is None:
            return None
        if skip or not words:
            continue
        seconds, status, exits = result
        if seconds is None:
            return FOREVER
        elapsed += seconds
        if exits:
            return Program(run_s=elapsed, exit_code=status)
    return Program(run_s=elapsed, exit_code=status)


def parse_command(argv: list[str]) -> Program | None:
    """The program of an exec-form ``command`` + ``args``, or None when not understood."""
    if not argv:
        return None
    name = argv[0].rsplit("/", 1)[-1]
    if name in SHELLS:
        if len(argv) >= 3 and argv[1] == "-c":
            return parse_script(argv[2])
        return None
    result = _statement(list(argv), 0)
    if result is None:
        return None
    seconds, status, _ = result
    return FOREVER if seconds is None else Program(run_s=seconds, exit_code=status)


def _run_seconds(pod: Pod) -> float | None:
    value = pod.metadata.annotations.get(RUN_SECONDS_ANNOTATION)
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def program_of(pod: Pod, container: Container) -> Program:
    """What ``container`` of ``pod`` does once started (see the module docstring for the rules)."""
    script = pod.metadata.annotations.get(RUN_ANNOTATION_PREFIX + container.name)
    if script is not None:
        program = parse_script(script)
        if program is not None:
            return program
    program = parse_command([*container.command, *container.args])
    if program is not None:
        return program
    seconds = _run_seconds(pod)
    if seconds is not None:
        return Program(run_s=seconds, exit_code=0)
    return FOREVER
