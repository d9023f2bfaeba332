"""Every console session of README.md and docs/*.md runs against a real system and prints what the
doc shows (tests/docs/sessions.py says how a doc steers it), so the docs cannot drift.

Each group of blocks (a doc's blocks from one ``<!-- session: system=NAME -->`` to the next) gets
its own ``honcho start`` from the repository's Procfile, with its own port offset and data dir,
and one shell that runs the blocks in order as a reader would.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.docs.sessions import DOCS, ROOT, Shell, matches, parse_doc
from tests.docs.systems import Group, groups, run_group

MAX_SKIPPED = 2  # console sessions that cannot run here (each says why in its doc)


def test_every_console_session_is_run_or_says_why_not() -> None:
    covered = {b.where for g in groups() for b in g.blocks}
    sessions = [b for doc in DOCS for b in parse_doc(doc) if b.lang == "console"]
    assert len(sessions) >= 35  # README 11, cli 9, demo 6, debugging 7, allocator 1, classic 1
    assert [b.where for b in sessions if b.where not in covered] == []
    skipped = [f"{b.where} ({b.options['skip']})" for b in sessions if b.skipped]
    assert len(skipped) <= MAX_SKIPPED, skipped
    for b in sessions:
        assert b.commands, f"{b.where}: a console block without a `$ ` command"


@pytest.fixture(scope="module")
def doc_runs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[list[str]]]]:
    """Every selected group, two at a time (most of a walkthrough's time is waiting: for a
    system to start, a heartbeat to expire, a pod to run), in doc order."""
    selected = [
        group
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.originalname == "test_doc_sessions"
        and isinstance(group := item.callspec.params["group"], Group)
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {group.id: pool.submit(run_group, group) for group in selected}
        try:
            yield runs
        finally:
            for run in runs.values():
                run.cancel()


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "group",
    [pytest.param(g, id=g.id, marks=[pytest.mark.slow] if g.slow else []) for g in groups()],
)
def test_doc_sessions(group: Group, doc_runs: dict[str, Future[list[str]]]) -> None:
    problems = doc_runs[group.id].result()
    assert not problems, "\n\n".join(problems)


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
    assert not matches(
        shown, [*printed[:1], printed[1].replace("node-1/gpu-0", "node-2/gpu-0"), *printed[2:]]
    )
    assert not matches(shown[:2], printed[:3])  # an extra line is a difference without `…`
    assert not matches(["pod/pod0 created"], ["pod/pod0 unchanged"])
    assert matches(["x: 42 of 7"], ["x: 3 of 9"], {"numbers"})
    assert matches(["b", "a"], ["a", "b"], {"order"})
    assert not matches(["b", "a"], ["a", "b", "c"], {"order"})
    assert matches(["b", "…"], ["a", "b", "c"], {"order"})
    assert matches(["x: …", "x: 1"], ["x: 1", "x: 2"], {"order"})  # exact lines are paired first


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


def test_a_shell_keeps_its_state_and_the_docs_tmp_is_its_own(tmp_path: Path) -> None:
    import os

    tmp = tmp_path
    shell = Shell(dict(os.environ), tmp)
    try:
        assert shell.run("cd examples && X=1")[0] == 0
        assert shell.run("pwd; echo $X")[1] == [str(ROOT / "examples"), "1"]
        assert shell.run("mkdir /tmp/at-61 && ls -d /tmp/at-61; echo oops >&2; false")[0] == 1
        assert (tmp / "at-61").is_dir()
        assert shell.run("ls -d /tmp/at-61")[1] == ["/tmp/at-61"]
    finally:
        shell.close()
