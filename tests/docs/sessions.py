"""The console sessions of README.md and docs/*.md, parsed, run and compared (tests/docs).

A session is a fenced ```console block: ``$ command`` lines (a command goes on while its quotes
are open or a line ends in ``\\``; a here-document to its terminator), each followed by the
output the doc shows (stdout and stderr as a terminal interleaves them; nothing shown means
nothing printed). A background job's (``cmd &``) output is what it has printed once it is up (the
harness waits for it, as a reader waits to see it start; more may follow). ```sh blocks are
commands a reader runs; each must exit 0. Read-only commands (``draflow get``, ``describe``,
``log``, ``explain``, ``trace``, ...; ``ls``, ``cat $...``, ``curl``) are run again until their
output matches, for up to ``wait`` seconds: the system needs a moment, as a reader gives it.

An HTML comment right before a block steers how it runs (keys separated by spaces or commas):

* ``<!-- session: system=NAME -->`` starts a fresh system (``honcho start`` from the Procfile,
  own port offset and data dir) for this block and the doc's following blocks, run in order in
  one shell as a reader would (cwd, variables and background jobs carry over). On a ```sh block
  ending in ``honcho start [PROCESS...]``, that block is the system: its ``VAR=value`` prefixes
  are the system's environment (``DRAFLOW_PORT_OFFSET`` is replaced by a free one); a later
  block that starts a system is not run. ``system=none``: no system (commands that need none).
* ``slow``: (with ``system=``) the group is marked ``slow``.
* ``skip (reason)``: not run; the reason is required and the number of skips stays small.
* ``vary=numbers|nodes|devices|instances|order``: output parts that legitimately vary in this
  block: every number, the demo's node names, its GPUs (``gpu-3``), which scheduler instance
  (``scheduler``, ``scheduler-b``), the order of the lines (then every line shown must be
  printed, and with a ``…`` line others may be too).
* ``wait=SECONDS``: how long a read-only command is retried (default 30).

In the expected output, a line ``…`` stands for any number of lines, and ``…`` inside a line for
any text (the docs shorten long ids and wide columns so). Both sides are normalised: times, uids,
ages, durations, rates, generated name suffixes, saga and log sequence numbers, Event name
hashes, trace ids, waterfall and progress bars, resourceVersions and runs of spaces (column
widths follow the content). The doc's ``/tmp/`` is a directory of the session's own, so a test
never touches another run's files.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
ELLIPSIS = "…"
DEFAULT_WAIT_S = 30.0

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\s*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*session:\s*(?P<body>.*?)\s*-->\s*$")
_BACKGROUND = re.compile(r"(?<![&|])&\s*(?:#[^\n]*)?$")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(?P<word>\w+)\1")


@dataclass
class Command:
    text: str
    line: int  # in the doc, 1-based
    expected: list[str] = field(default_factory=list)

    @property
    def background(self) -> bool:
        """``cmd &`` (a comment may follow): a job that goes on while the session does."""
        return _BACKGROUND.search(self.text) is not None


@dataclass
class Block:
    doc: Path
    line: int  # of the opening fence
    lang: str  # console | sh
    commands: list[Command]
    options: dict[str, str]

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def skipped(self) -> bool:
        return "skip" in self.options

    @property
    def vary(self) -> set[str]:
        return set(filter(None, self.options.get("vary", "").split("|")))


def parse_options(body: str) -> dict[str, str]:
    """``system=demo slow vary=numbers|nodes skip (why)`` -> {"system": "demo", ...}."""
    options: dict[str, str] = {}
    skip = re.search(r"\bskip\s*\((?P<why>[^)]*)\)", body)
    if skip:
        options["skip"] = skip["why"].strip()
        body = body[: skip.start()] + body[skip.end() :]
    for token in re.split(r"[\s,]+", body.strip()):
        if not token:
            continue
        key, _, value = token.partition("=")
        options[key] = value
    if "skip" in options and not options["skip"]:
        raise ValueError(f"a skipped session needs a reason: {body!r}")
    return options


def _complete(command: str) -> bool:
    """Whether ``command`` is a whole shell command (no open quote, no trailing ``\\``, here-docs
    closed)."""
    lines = command.split("\n")
    for i, line in enumerate(lines):
        match = _HEREDOC.search(line)
        if match:
            word = match["word"]
            return any(rest.strip() == word for rest in lines[i + 1 :])
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return not command.rstrip("\n").endswith("\\")


def parse_commands(lines: list[str], first_line: int, lang: str) -> list[Command]:
    commands: list[Command] = []
    current: Command | None = None
    for offset, raw in enumerate(lines):
        number = first_line + offset
        if current is not None and not _complete(current.text):
            current.text += "\n" + raw
            continue
        if lang == "sh":
            if raw.strip() and not raw.lstrip().startswith("#"):
                current = Command(raw, number)
                commands.append(current)
            continue
        if raw.startswith("$ "):
            current = Command(raw[2:], number)
            commands.append(current)
        elif current is None:
            if raw.strip():
                raise ValueError(f"line {number}: output before the first `$ ` command: {raw!r}")
        else:
            current.expected.append(raw)
    if current is not None and not _complete(current.text):
        raise ValueError(f"line {current.line}: the command never ends: {current.text!r}")
    return commands


def parse_doc(doc: Path) -> list[Block]:
    """Every ```console and ```sh block of ``doc``, with the directive before it."""
    text = doc.read_text().split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(text):
        fence = _FENCE.match(text[i])
        if not fence or not fence["lang"]:
            if fence:  # a plain block: skip to its end
                i += 1
                while i < len(text) and not _FENCE.match(text[i]):
                    i += 1
            i += 1
            continue
        indent, lang = fence["indent"], fence["lang"]
        start = i
        body: list[str] = []
        i += 1
        while i < len(text) and text[i].strip() != "```":
            line = text[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1
        if lang not in ("console", "sh"):
            continue
        options: dict[str, str] = {}
        j = start - 1
        while j >= 0 and not text[j].strip():
            j -= 1
        if j >= 0 and (directive := _DIRECTIVE.match(text[j])):
            options = parse_options(directive["body"])
        blocks.append(Block(doc, start + 1, lang, parse_commands(body, start + 2, lang), options))
    return blocks


# ---------------------------------------------------------------------------------------------
# Normalising and matching

_NORMALISERS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})", "<time>"),
        (r"\b[0-9a-f]{8}-(?:[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|…)", "<uid>"),
        (r"(-ps-<uid>)-\d+", r"\1-<n>"),  # saga ids: the pod's uid and the log position
        (r"\btrace [0-9a-f]{32}\b", "trace <trace-id>"),
        (r"\.[0-9a-f]{16}\b", ".<hash>"),  # Event names
        (r"-[bcdfghjklmnpqrstvwxz2456789]{5}\b", "-<sfx>"),  # generateName suffixes
        (r"(?<![\w.])\d+\.\d+ ?(?:s|ms)\b", "<duration>"),
        (r"(?<![\w.:-])\d+(?:d|h|m|s)(?:\d+(?:h|m|s))?(?![\w.])", "<age>"),
        (r"(?<![\w.])[\d,]+ events/s\b", "<rate> events/s"),
        (r"(Resource Version:\s+|resourceVersion: )\"?\d+\"?", r"\1<rv>"),
        (r"^(\s*)\d+(\s+<time>)", r"\1<seq>\2"),  # `draflow log` and explain's history rows
        (r"\bseq \d+", "seq <n>"),
        (r"(?<=\s)#+(?=\s)", "#"),  # a trace's waterfall bars
        (r"\[[#-]+\]", "[<progress>]"),
    )
)
_VARY: dict[str, tuple[tuple[re.Pattern[str], str], ...]] = {
    "numbers": ((re.compile(r"\d+(?:[.,]\d+)*"), "<n>"),),
    "nodes": ((re.compile(r"\bnode-[1-4]\b"), "node-<n>"),),
    "devices": ((re.compile(r"\bgpu-\d+\b"), "gpu-<n>"),),
    "instances": ((re.compile(r"\bscheduler-b\b"), "scheduler"),),
}


def normalise(line: str, vary: AbstractSet[str] = frozenset()) -> str:
    for pattern, replacement in _NORMALISERS:
        line = pattern.sub(replacement, line)
    for key in sorted(vary):
        for pattern, replacement in _VARY.get(key, ()):
            line = pattern.sub(replacement, line)
    return re.sub(r"\s+", " ", line).strip()


def matches(expected: list[str], actual: list[str], vary: AbstractSet[str] = frozenset()) -> bool:
    """Whether ``actual`` output lines are what the doc shows (``…`` lines and parts as above)."""
    want = [normalise(line, vary) for line in expected]
    got = [normalise(line, vary) for line in actual]
    while got and not got[-1]:
        got.pop()
    while want and not want[-1]:
        want.pop()
    if "order" in vary:  # every line shown is printed, in any order (and others too after a `…`)
        rest = list(got)
        shown = sorted((w for w in want if w != ELLIPSIS), key=lambda w: ELLIPSIS in w)
        for line in shown:  # the exact lines first, then those with a `…` in them
            hit = next((g for g in rest if re.fullmatch(_line_pattern(line), g)), None)
            if hit is None:
                return False
            rest.remove(hit)
        return ELLIPSIS in want or not rest
    pattern = "".join(r"(?:[^\n]*\n)*?" if line == ELLIPSIS else _line_pattern(line) + r"\n" for line in want)
    return re.fullmatch(pattern, "".join(g + "\n" for g in got), flags=re.S) is not None


def _line_pattern(line: str) -> str:
    return ".*?".join(re.escape(part) for part in line.split(ELLIPSIS))


# ---------------------------------------------------------------------------------------------
# Running

READ_ONLY = re.compile(
    r"^\s*(?:sleep \d+(?:\.\d+)?;\s*)?(?:draflow (?:get|describe|events|log|explain|trace|verify-replay)\b"
    r"|kubectl (?:get|describe|explain|api-resources)\b|ls\b|cat \$|curl\b)"
)


def read_only(command: str) -> bool:
    """Commands a reader may run again until the system has caught up (they change nothing)."""
    return bool(READ_ONLY.match(command)) and " -w" not in command and ">" not in command.replace("->", "")


class Shell:
    """One ``bash`` for a whole walkthrough: cwd, variables and jobs carry over between commands.

    Each command's stdout and stderr go to one file (as a terminal shows them, interleaved); a
    background job (``cmd &``) writes to a log of its own."""

    MARK = "__draflow_session_done__"

    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.tmp = tmp
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            cwd=ROOT,
            env={**env, "PYTHONUNBUFFERED": "1", "TERM": "dumb"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.count = 0

    def local(self, command: str) -> str:
        """The doc's ``/tmp/`` is this session's directory."""
        return re.sub(r"(?<![\w./])/tmp/", f"{self.tmp}/", command)

    def run(self, command: str, timeout_s: float = 300, job_log: Path | None = None) -> tuple[int, list[str]]:
        """Run one command; its exit code and output lines. With ``job_log``, ``command`` is
        started as a background job writing there."""
        self.count += 1
        out = self.tmp / f".out-{self.count}"
        assert self.proc.stdin is not None and self.proc.stdout is not None
        command = self.local(command)
        if job_log is not None:
            command = f"{command} > {job_log} 2>&1 &"
        self.proc.stdin.write(f"{{ {command}\n}} > {out} 2>&1 < /dev/null\necho {self.MARK} $?\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        code = -1
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"the shell exited while running {command!r}")
            if line.startswith(self.MARK):
                code = int(line.split()[1])
                break
        return code, self.printed(out)

    def printed(self, path: Path) -> list[str]:
        """The lines of an output file as a terminal shows them (the doc's ``/tmp/`` again)."""
        text = path.read_bytes().decode(errors="replace") if path.exists() else ""  # keeps the \r
        text = text.replace(f"{self.tmp}/", "/tmp/")
        text = "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))  # a terminal's redraws
        return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")

    def close(self) -> None:
        """Stop the shell and every job it started (its own session: one process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@dataclass
class Mismatch:
    block: Block
    command: Command
    actual: list[str]
    code: int

    def __str__(self) -> str:
        expected = "\n".join(f"    {line}" for line in self.command.expected) or "    (nothing)"
        actual = "\n".join(f"    {line}" for line in self.actual) or "    (nothing)"
        return (
            f"{self.block.doc.relative_to(ROOT)}:{self.command.line}: $ {self.command.text}\n"
            f"  the doc shows:\n{expected}\n  the command printed (exit {self.code}):\n{actual}"
        )


def run_block(shell: Shell, block: Block) -> Iterator[Mismatch]:
    """Run a block's commands in order; yield the ones whose output is not what the doc shows."""
    wait_s = float(block.options.get("wait", DEFAULT_WAIT_S))
    for command in block.commands:
        if block.lang == "sh":
            code, actual = shell.run(command.text)
            if code != 0:
                yield Mismatch(block, command, actual, code)
            continue
        if command.background:  # what the doc shows is what the job has printed once it is up
            log = shell.tmp / f".job-{command.line}.log"
            code, _ = shell.run(_BACKGROUND.sub("", command.text), job_log=log)
            deadline = time.monotonic() + wait_s
            while command.expected:
                printed = shell.printed(log)
                if matches([*command.expected, ELLIPSIS], printed, block.vary):
                    break
                if time.monotonic() > deadline:
                    yield Mismatch(block, command, printed, code)
                    break
                time.sleep(0.2)
            continue
        code, actual = shell.run(command.text)
        if matches(command.expected, actual, block.vary):
            continue
        if read_only(command.text):
            again = re.sub(r"^\s*sleep \d+(?:\.\d+)?;\s*", "", command.text)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                time.sleep(0.5)
                code, actual = shell.run(again)
                if matches(command.expected, actual, block.vary):
                    break
            else:
                yield Mismatch(block, command, actual, code)
            continue
        yield Mismatch(block, command, actual, code)


def new_tmp() -> Path:
    return Path(tempfile.mkdtemp(prefix="draflow-doc-session-"))
