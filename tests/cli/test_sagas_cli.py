"""``draflow get sagas`` / ``describe saga``: sagas run by the real engine, read from the log."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from infra.config import Settings
from infra.errors import TransientError
from infra.eventstore import EventStore
from sagas.engine import SagaDefinition, SagaEngine, Step, StepContext
from services.cli.main import main
from tests.cli.conftest import Result

Cli = Callable[..., Result]


class PodInput(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pod: str = ""


def _definition(fail: dict[str, int], permanent: set[str], gate: asyncio.Event | None) -> SagaDefinition:
    def action(name: str) -> Any:
        async def run(ctx: StepContext) -> dict[str, Any]:
            if name == "b" and gate is not None:
                gate.set()
                await asyncio.Event().wait()  # never returns: the saga stays Running
            if fail.get(name, 0) > 0:
                fail[name] -= 1
                raise TransientError(f"{name} busy")
            if name in permanent:
                raise ValueError(f"{name} impossible")
            return {"done": name}

        return run

    async def undo(ctx: StepContext) -> None:
        return None

    return SagaDefinition("T", tuple(Step(n, action(n), undo) for n in ("a", "b", "c")), PodInput)


async def _run_sagas(settings: Settings) -> dict[str, int]:
    """s-ok Completed, s-comp Compensated (c gives up after 3 attempts), s-run left Running at b."""
    store = await EventStore.open(settings, "test")
    try:
        ok = SagaEngine(store, [_definition({"b": 1}, set(), None)], retry_initial_s=0.01)
        await ok.start("T", "s-ok", PodInput(pod="default/p0"))
        comp = SagaEngine(
            store, [_definition({"c": 99}, set(), None)], retry_attempts=3, retry_initial_s=0.01
        )
        await comp.start("T", "s-comp")

        async def ok_step(ctx: StepContext) -> None:
            return None

        async def boom(ctx: StepContext) -> None:
            raise RuntimeError("cannot undo")

        async def fail(ctx: StepContext) -> None:
            raise ValueError("no")

        cf = SagaEngine(store, [SagaDefinition("U", (Step("a", ok_step, boom), Step("b", fail)))])
        await cf.start("U", "s-cf")
        gate = asyncio.Event()
        running = SagaEngine(store, [_definition({}, set(), gate)])
        task = asyncio.create_task(running.start("T", "s-run"))
        await gate.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        seqs = {
            e.type + ":" + e.subject.rsplit(".", 1)[-1]: e.seq
            for e in await store.events(f"{settings.root}.ev.>")
        }
        return seqs
    finally:
        await store.close()


@pytest.fixture
def cli(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Cli]:
    """``draflow ARGS...`` in-process with no apiserver: saga commands read the log themselves."""
    monkeypatch.setenv("DRAFLOW_NATS_URL", settings.nats_url)
    monkeypatch.setenv("DRAFLOW_STREAM", settings.stream)
    monkeypatch.setenv("DRAFLOW_SUBJECT_ROOT", settings.root)

    def run(*args: str) -> Result:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    yield run

    async def drop() -> None:
        store = await EventStore.open(settings, "test", ensure=False)
        try:
            await store.js.delete_stream(settings.stream)
        finally:
            await store.close()

    asyncio.run(drop())


def _rows(out: str) -> dict[str, list[str]]:
    return {cols[0]: cols for cols in (re.split(r"\s{2,}", line.strip()) for line in out.splitlines()[1:])}


def test_get_sagas_and_describe_saga(settings: Settings, cli: Cli) -> None:
    seqs = asyncio.run(_run_sagas(settings))
    res = cli("get", "sagas")
    assert res.code == 0, res.err
    assert res.out.splitlines()[0].split() == ["ID", "TYPE", "STATE", "STEP", "ATTEMPTS", "AGE"]
    rows = _rows(res.out)
    assert list(rows) == ["s-ok", "s-comp", "s-cf", "s-run"]  # by creation
    assert rows["s-cf"][1:5] == ["U", "CompensationFailed", "a (1/2)", "1"]
    assert rows["s-ok"][1:5] == ["T", "Completed", "c (3/3)", "1"]
    assert rows["s-comp"][1:5] == ["T", "Compensated", "c (3/3)", "3"]
    assert rows["s-run"][1:5] == ["T", "Running", "b (2/3)", "1"]

    assert list(_rows(cli("get", "sagas", "--state", "compensated").out)) == ["s-comp"]
    assert list(_rows(cli("get", "sagas", "--state", "CompensationFailed").out)) == ["s-cf"]
    assert cli("get", "sagas", "--state", "Compensating") == (0, "", "No sagas found in state Compensating\n")
    assert cli("get", "sagas", "--state", "Done") == (
        1,
        "",
        "error: --state: unknown saga state 'Done' (one of Running, Compensating, Completed, "
        "Compensated, CompensationFailed)\n",
    )
    assert cli("get", "sagas", "-o", "name").out == "saga/s-ok\nsaga/s-comp\nsaga/s-cf\nsaga/s-run\n"
    one = json.loads(cli("get", "saga", "s-comp", "-o", "json").out)
    assert one["state"] == "Compensated" and one["error"].startswith("c: gave up after 3 attempts")
    assert {s["compensation_state"] for s in one["steps"]} == {"Compensated"}
    assert [(s["name"], s["state"], s["attempts"]) for s in one["steps"]] == [
        ("a", "Completed", 1),
        ("b", "Completed", 1),
        ("c", "Failed", 3),
    ]
    assert cli("get", "saga", "nope") == (1, "", 'Error from server (NotFound): sagas "nope" not found\n')

    # the past: just before c failed, s-comp was still running step c
    before = cli("get", "sagas", "--as-of-seq", str(seqs["SagaStepFailed:s-comp"] - 1))
    assert list(_rows(before.out)) == ["s-ok", "s-comp"]
    assert _rows(before.out)["s-comp"][2:5] == ["Running", "c (3/3)", "1"]

    desc = cli("describe", "saga", "s-comp")
    assert desc.code == 0, desc.err
    # kubectl's round trip: what `get -o name` prints is what get and describe take
    assert cli("describe", "saga/s-comp") == desc
    assert cli("get", "saga/s-comp", "saga/s-ok", "-o", "name").out == "saga/s-ok\nsaga/s-comp\n"
    lines = desc.out.splitlines()
    assert lines[:3] == ["ID:           s-comp", "Type:         T", "State:        Compensated"]
    assert lines[3].startswith("Error:        c: gave up after 3 attempts: TransientError: c busy")
    steps = lines.index("Steps:")
    assert lines[steps + 1].split() == [
        "#",
        "Step",
        "State",
        "Attempts",
        "Started",
        "Finished",
        "Last",
        "Error",
    ]
    assert lines[steps + 4].split()[:4] == ["3", "c", "Failed", "3"]
    assert "gave up after 3 attempts" in lines[steps + 4]
    comp = lines.index("Compensations:")
    assert [ln.split()[:3] for ln in lines[comp + 2 : comp + 5]] == [
        ["c", "c:compensate", "Compensated"],
        ["b", "b:compensate", "Compensated"],
        ["a", "a:compensate", "Compensated"],
    ]
    running = cli("describe", "saga", "s-run").out
    assert "State:        Running" in running and "Input:        <none>" in running
    assert re.search(r"^\s+2\s+b\s+Running\s+1\s", running, re.M)
    assert re.search(r"^\s+a\s+a:compensate\s+Registered", running, re.M)
    cf = cli("describe", "saga", "s-cf").out
    assert re.search(r"^\s+a\s+a:compensate\s+Failed\s", cf, re.M), cf
    assert re.search(r"^\s+1\s+a\s+Completed\s+1\s.*compensating: RuntimeError: cannot undo", cf, re.M), cf
    done = cli("describe", "saga", "s-ok").out
    assert 'Input:        {"pod": "default/p0"}' in done
    assert re.search(r"^\s+c\s+c:compensate\s+Registered\s+-$", done, re.M), done
    assert cli("describe", "saga", "nope") == (
        1,
        "",
        'Error from server (NotFound): sagas "nope" not found\n',
    )
    assert cli("describe", "saga").err == "error: describe saga: give the saga ID (see `draflow get sagas`)\n"
