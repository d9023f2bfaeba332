"""Stopping a scheduler's sagas where a test wants them: held before a step, or stopped dead right
after one particular append landed (as a crash there would leave the log).

Both wrap the *real* saga steps and the real event store; nothing is simulated but the moment.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from draflow.events.envelope import Event
from draflow.sagas.engine import SagaEngine, StepContext
from draflow.services.scheduler.sagas.pod_scheduling import POD_SCHEDULING_SAGA
from draflow.services.scheduler.service import SchedulerService

Match = Callable[[str, Sequence[Event]], bool]


class HeldBefore:
    """A PodScheduling engine for ``svc`` whose step ``step`` waits for :meth:`release` before it
    runs: the earlier steps' writes are in the log, the held one's are not (the window in which a
    test injects a conflicting write between two steps)."""

    def __init__(self, svc: SchedulerService, step: str) -> None:
        self.reached = asyncio.Event()
        self.go = asyncio.Event()
        real = POD_SCHEDULING_SAGA
        assert step in [s.name for s in real.steps], step

        def held(action: Any) -> Any:
            async def run(ctx: StepContext) -> dict[str, Any] | None:
                self.reached.set()
                await self.go.wait()
                out: dict[str, Any] | None = await action(ctx)
                return out

            return run

        steps = tuple(
            msgspec.structs.replace(s, action=held(s.action)) if s.name == step else s for s in real.steps
        )
        self.engine = SagaEngine(svc.store, [msgspec.structs.replace(real, steps=steps)], deps=svc)

    def release(self) -> None:
        self.go.set()


class StopAfterAppend:
    """Once an append of ``svc``'s store matching ``match`` (subject, events; or one of the other
    subjects of its atomic batch with its event) has landed, the
    appending coroutine never returns: the test then cancels the saga task, which is what the
    service does to in-flight sagas when it stops, and drops the connection. The log is left
    exactly as a process killed right after that append leaves it."""

    def __init__(self, store: Any, match: Match) -> None:
        self.landed = asyncio.Event()
        self.seqs: tuple[int, ...] = ()
        real = store.append

        async def append(subject: str, events: Event | Sequence[Event], **kw: Any) -> tuple[int, ...]:
            seqs: tuple[int, ...] = await real(subject, events, **kw)
            batch = [events] if isinstance(events, Event) else list(events)
            # the batch's other subjects too (guards, a saga step's completion riding along)
            parts = [(subject, batch), *((g.subject, [g.event]) for g in kw.get("guards", ()))]
            if not self.landed.is_set() and any(match(s, evs) for s, evs in parts):
                self.seqs = seqs
                self.landed.set()
                await asyncio.Event().wait()  # stopped here: nothing after this append happens
            return seqs

        store.append = append


async def stop_dead(task: asyncio.Task[Any], svc: SchedulerService) -> None:
    """Cancel the stopped saga task and close the instance (snapshot follower and connection)."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:  # pragma: no cover - the task was meant to hang
        raise AssertionError("the saga finished instead of being stopped")
    await svc.snapshot.stop()
    await svc.store.close()


class BeforeAppend:
    """Runs ``inject`` once, right before the first append of ``store`` matching ``match`` is sent:
    a write by someone else between a step's read and its optimistic append."""

    def __init__(self, store: Any, match: Match, inject: Callable[[], Awaitable[None]]) -> None:
        self.done = False
        real = store.append

        async def append(subject: str, events: Event | Sequence[Event], **kw: Any) -> tuple[int, ...]:
            batch = [events] if isinstance(events, Event) else list(events)
            if not self.done and match(subject, batch):
                self.done = True
                await inject()
            seqs: tuple[int, ...] = await real(subject, events, **kw)
            return seqs

        store.append = append
