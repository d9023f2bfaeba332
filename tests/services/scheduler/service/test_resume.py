"""A PodScheduling saga stopped dead mid-run is finished by the next instance, every write once.

The scenario of :mod:`.scenario`. The saga is stopped right after one append landed — inside
PreBind, between PreBind and Bind, inside the compensation's release, between two compensations —
in-process (its task cancelled, as the service does to in-flight sagas when it stops, and its
connection closed) or by SIGKILL of a real scheduler process (:mod:`.saga_worker`). A new instance
starts, resumes the saga from the log (forward to a bound pod, or backward to the undone state),
and the log shows each of the saga's writes exactly once: what ran before the stop is not
repeated, what was owed is done, by the new instance.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from draflow.events.dra import ClaimAllocated, ClaimDeallocated, PodBound
from draflow.events.envelope import Event
from draflow.events.guard import GuardReleased, GuardTaken
from draflow.events.saga import SagaStepCompensated, SagaStepCompleted
from draflow.infra.config import Settings
from draflow.infra.guard import held
from draflow.sagas.engine import SagaEngine, SagaStatus, Step
from draflow.services.scheduler.sagas.pod_scheduling import POD_SCHEDULING, POD_SCHEDULING_SAGA
from tests.paths import ROOT
from tests.services.scheduler.service.conftest import Cluster
from tests.services.scheduler.service.interrupt import HeldBefore, StopAfterAppend, stop_dead
from tests.services.scheduler.service.scenario import (
    FORWARD,
    Q_SAGA,
    Instances,
    assert_q_intact,
    build,
    decide,
    everything,
    load_claim,
    quiet,
    released_only_p,
    saga_id_of,
    saga_trail,
    undone_between_failure_and_compensation,
    writes,
)

pytestmark = pytest.mark.kep4381


def _on_claim(name: str, kind: type[Event]) -> Any:
    return lambda subject, events: (
        subject.endswith(f".ResourceClaim.default.{name}") and any(isinstance(e, kind) for e in events)
    )


def _saga_event(kind: type[Event], step: str) -> Any:
    return lambda subject, events: (
        ".Saga." in subject and any(isinstance(e, kind) and getattr(e, "step", "") == step for e in events)
    )


# the undo of FORWARD once p is deleted before Bind: claim by claim in reverse, allocations given
# back (p's reservation leaving in the same fact; the devices' guards need no message)
UNDONE = [
    ("p-gpu", "ClaimDeallocated"),
    ("joint", "ClaimDeallocated"),
    ("shared", "ClaimReservationsReleased"),
]


def _took_guard(claim: str) -> Any:
    """PreBind's take of ``claim``'s device landed (its ``ClaimAllocated`` not yet sent)."""
    holder = f"ResourceClaim default/{claim}"
    return lambda subject, events: (
        ".Guard." in subject and any(isinstance(e, GuardTaken) and e.holder == holder for e in events)
    )


def _bound(subject: str, events: Sequence[Event]) -> bool:
    return subject.endswith(".Pod.default.p") and any(isinstance(e, PodBound) for e in events)


def _legacy(engine: SagaEngine) -> SagaEngine:
    """The engine as it was before the saga's shortcuts: every step's start and completion are
    saga events of their own (what logs recorded before hold)."""
    steps = tuple(Step(s.name, s.action, s.compensate) for s in POD_SCHEDULING_SAGA.steps)
    definition = msgspec.structs.replace(POD_SCHEDULING_SAGA, steps=steps)
    return SagaEngine(engine.store, [definition], deps=engine.deps)


@pytest.mark.parametrize(
    ("stop_at", "trail_end", "legacy"),
    [
        # joint's device taken, joint not written: between PreBind's two appends of one claim
        pytest.param(_took_guard("joint"), "SagaStarted", False, id="between-take-and-claim"),
        # joint written, p-gpu not: PreBind half done (its steps log no events of their own)
        pytest.param(_on_claim("joint", ClaimAllocated), "SagaStarted", False, id="inside-prebind"),
        # p-gpu written too, the pod not bound: between PreBind and Bind
        pytest.param(_on_claim("p-gpu", ClaimAllocated), "SagaStarted", False, id="after-prebind"),
        # the pod bound, SagaCompleted not recorded: the re-run finds its own writes in place
        pytest.param(_bound, "SagaStarted", False, id="bound-not-recorded"),
        # a saga recorded before the shortcuts, stopped between PreBind and Bind
        pytest.param(
            _saga_event(SagaStepCompleted, "prebind"), "SagaStepCompleted", True, id="legacy-after-prebind"
        ),
        # a saga recorded before the shortcuts, stopped inside PreBind
        pytest.param(_on_claim("joint", ClaimAllocated), "SagaStepStarted", True, id="legacy-inside-prebind"),
        # recorded before the shortcuts: the pod bound, Bind's completion not recorded (it now
        # lands with PodBound); the re-run finds its own binding
        pytest.param(_bound, "SagaStepStarted", True, id="legacy-bound-not-recorded"),
    ],
)
async def test_stopped_forward_is_finished_by_the_next_instance(
    cluster: Cluster, instances: Instances, stop_at: Any, trail_end: str, legacy: bool
) -> None:
    p, q, a = await build(cluster, instances)
    plan = await decide(a, p)
    sid = saga_id_of(p)
    q_writes = writes(await everything(cluster), Q_SAGA)
    stop = StopAfterAppend(a.store, stop_at)
    engine = _legacy(a.engine) if legacy else a.engine
    task = asyncio.create_task(engine.start(POD_SCHEDULING, sid, plan))
    await asyncio.wait_for(stop.landed.wait(), 10)
    await stop_dead(task, a)
    interrupted = [e.type for e in saga_trail(await everything(cluster), sid)]
    assert interrupted[-1] == trail_end

    b = await instances.start("scheduler-b")  # resumes what a left unfinished, before deciding
    state = await b.engine.load(sid)
    assert state is not None and state.status is SagaStatus.COMPLETED, state
    log = await everything(cluster)
    assert writes(log, sid) == [*FORWARD, ("p", "PodBound")]  # each write once, by the saga's id
    trail = saga_trail(log, sid)
    resumed = [e for e in trail if e.seq > trail[len(interrupted) - 1].seq]
    assert resumed and {e.actor for e in resumed} == {"scheduler-b"}, [(e.type, e.actor) for e in trail]
    assert resumed[-1].type == "SagaCompleted"
    bound = [e for e in log if isinstance(e.data, PodBound)]
    binder = "scheduler-a" if stop_at is _bound else "scheduler-b"  # who appended PodBound
    assert [(e.correlation_id, e.actor) for e in bound] == [(sid, binder)]
    for name in ("joint", "p-gpu"):
        claim = await load_claim(cluster, name)
        assert claim.status.allocation is not None and [r.uid for r in claim.status.reserved_for] == [
            p.metadata.uid
        ]
    await assert_q_intact(cluster, q, q_writes, p)
    await quiet(cluster, b.engine.run, sid)


@pytest.mark.parametrize(
    ("stop_at", "trail_end"),
    [
        # the first claim's release landed, the others not; PreBind's compensation not recorded
        pytest.param(_on_claim("p-gpu", ClaimDeallocated), "SagaStepFailed", id="inside-release"),
        # PreBind's compensation recorded, Reserve's (unreserve) not
        pytest.param(
            _saga_event(SagaStepCompensated, "prebind"), "SagaStepCompensated", id="between-compensations"
        ),
    ],
)
async def test_stopped_compensation_is_finished_by_the_next_instance(
    cluster: Cluster, instances: Instances, stop_at: Any, trail_end: str
) -> None:
    p, q, a = await build(cluster, instances)
    plan = await decide(a, p)
    sid = saga_id_of(p)
    held = HeldBefore(a, "bind")
    stop = StopAfterAppend(a.store, stop_at)
    task = asyncio.create_task(held.engine.start(POD_SCHEDULING, sid, plan))
    await asyncio.wait_for(held.reached.wait(), 10)
    (result,) = await cluster.api.delete([("Pod", "default", "p")])  # Bind will fail
    assert result.error is None, result.error
    q_writes = writes(await everything(cluster), Q_SAGA)
    held.release()
    await asyncio.wait_for(stop.landed.wait(), 10)
    await stop_dead(task, a)
    assert saga_trail(await everything(cluster), sid)[-1].type == trail_end

    b = await instances.start("scheduler-b")
    state = await b.engine.load(sid)
    assert state is not None and state.status is SagaStatus.COMPENSATED, state
    log = await everything(cluster)
    # every undo exactly once: what ran before the stop is not repeated, the rest is done
    assert writes(log, sid) == [*FORWARD, *UNDONE]
    undone_between_failure_and_compensation(log, sid, "bind")
    released_only_p(log, sid, p)
    trail = saga_trail(log, sid)
    assert trail[-1].actor == "scheduler-b"
    for name in ("joint", "p-gpu"):
        claim = await load_claim(cluster, name)
        assert claim.status.allocation is None and claim.status.reserved_for == ()
    await assert_q_intact(cluster, q, q_writes)
    await quiet(cluster, b.engine.run, sid)


async def _line(proc: asyncio.subprocess.Process, prefix: str, timeout_s: float = 30.0) -> str:
    assert proc.stdout is not None
    async with asyncio.timeout(timeout_s):
        while True:
            raw = await proc.stdout.readline()
            if not raw:
                err = await proc.stderr.read() if proc.stderr else b""
                raise AssertionError(f"worker exited before {prefix!r}:\n{err.decode()}")
            if raw.decode().startswith(prefix):
                return raw.decode().strip()


async def test_scheduler_killed_inside_the_compensation_is_finished_by_the_next_instance(
    cluster: Cluster, instances: Instances, settings: Settings
) -> None:
    """As ``inside-release`` above, with a real scheduler process SIGKILLed right after its first
    release landed (it had decided nothing itself: it re-assumed the plan it was given)."""
    p, q, a = await build(cluster, instances)
    plan = await decide(a, p)
    sid = saga_id_of(p)
    env = {
        **os.environ,
        "DRAFLOW_NATS_URL": settings.nats_url,
        "DRAFLOW_STREAM": settings.stream,
        "DRAFLOW_SUBJECT_ROOT": settings.root,
        "DRAFLOW_DATA_DIR": str(settings.data_dir),
        "PLAN": msgspec.json.encode(plan).decode(),
        "HOLD_BEFORE": "bind",
        "STOP_AFTER": "p-gpu:ClaimDeallocated",
    }
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.services.scheduler.service.saga_worker",
        "scheduler-a",
        sid,
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        await _line(worker, "HELD bind")
        (result,) = await cluster.api.delete([("Pod", "default", "p")])  # Bind will fail
        assert result.error is None, result.error
        q_writes = writes(await everything(cluster), Q_SAGA)
        assert worker.stdin is not None
        worker.stdin.write(b"go\n")
        await worker.stdin.drain()
        await _line(worker, "STOPPED")
        worker.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(worker.wait(), 10) == -signal.SIGKILL
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    killed = saga_trail(await everything(cluster), sid)
    assert killed[-1].type == "SagaStepFailed" and {e.actor for e in killed} == {"scheduler-a"}

    b = await instances.start("scheduler-b")
    state = await b.engine.load(sid)
    assert state is not None and state.status is SagaStatus.COMPENSATED, state
    log = await everything(cluster)
    assert writes(log, sid) == [*FORWARD, *UNDONE]
    undone_between_failure_and_compensation(log, sid, "bind")
    released_only_p(log, sid, p)
    by_b = [e for e in saga_trail(log, sid) if e.seq > killed[-1].seq]
    assert [e.type for e in by_b] == ["SagaStepCompensated", "SagaStepCompensated", "SagaCompensated"]
    assert {e.actor for e in by_b} == {"scheduler-b"}
    await assert_q_intact(cluster, q, q_writes)
    await quiet(cluster, b.engine.run, sid)


async def test_stopped_between_take_and_claim_with_the_pod_gone_gives_the_take_back(
    cluster: Cluster, instances: Instances
) -> None:
    """Stopped dead right after joint's device was taken, before joint's ``ClaimAllocated``; the
    pod is deleted before another instance resumes the saga. Its Reserve fails (pod gone), so
    only Reserve's compensation is owed: it gives back the take no allocation backs, or the
    device's guard would stay held by a claim that never got it, and every other decision on
    that device would conflict with it."""
    p, _, a = await build(cluster, instances)
    plan = await decide(a, p)
    sid = saga_id_of(p)
    stop = StopAfterAppend(a.store, _took_guard("joint"))
    task = asyncio.create_task(a.engine.start(POD_SCHEDULING, sid, plan))
    await asyncio.wait_for(stop.landed.wait(), 10)
    await stop_dead(task, a)
    (result,) = await cluster.api.delete([("Pod", "default", "p")])
    assert result.error is None, result.error

    b = await instances.start("scheduler-b")
    state = await b.engine.load(sid)
    assert state is not None and state.status is SagaStatus.COMPENSATED, state
    assert state.error.startswith("reserve: SchedulingConflict: pod default/p"), state.error
    log = await everything(cluster)
    assert writes(log, sid) == [
        ("shared", "ClaimReserved"),
        ("guard", "GuardTaken"),
        ("guard", "GuardReleased"),
    ]
    take, release = [e for e in log if e.correlation_id == sid and ".Guard." in e.subject]
    assert (take.actor, release.actor) == ("scheduler-a", "scheduler-b") and take.subject == release.subject
    assert isinstance(release.data, GuardReleased) and release.data.holder == "ResourceClaim default/joint"
    assert held(await cluster.store.events(take.subject)) == {}
    assert (await load_claim(cluster, "joint")).status.allocation is None
    await b.snapshot.wait_position(await cluster.store.stream_last_seq())
    assert b.snapshot.guard_heads.unbacked == {}  # the device's version counts again
    assert b.snapshot.guard_heads[take.subject] == release.seq
    await quiet(cluster, b.engine.run, sid)
