"""A scheduler process that runs one PodScheduling saga and waits to be killed where a test wants.

``python -m tests.scheduler_service.saga_worker <instance> <saga id>`` with the plan (the saga's
input, JSON) in ``PLAN`` and the usual ``DRAFLOW_*`` settings. The saga's steps are the real ones
on a real scheduler instance (snapshot caught up); two switches stop it:

* ``HOLD_BEFORE=<step>`` — print ``HELD <step>`` before that step runs and wait for a line on stdin
  (the test changes the cluster meanwhile);
* ``STOP_AFTER=<object name>:<event type>`` — once an append of that event on that object's
  subject has landed, print ``STOPPED`` and wait (the test SIGKILLs the process there).

At the end it prints ``RESULT <status>``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence

import msgspec

from events.envelope import Event
from infra.config import Settings
from infra.eventstore import EventStore
from services.scheduler.sagas.pod_scheduling import POD_SCHEDULING, PodSchedulingInput
from services.scheduler.service import SchedulerService
from tests.scheduler_service.interrupt import HeldBefore, StopAfterAppend


async def main(instance: str, saga_id: str) -> int:
    store = await EventStore.open(Settings.from_env(), instance)
    svc = SchedulerService(store, instance=instance)
    await svc.snapshot.start()
    hold = os.environ.get("HOLD_BEFORE", "")
    held = HeldBefore(svc, hold or "bind")
    if not hold:
        held.release()
    stop_after = os.environ.get("STOP_AFTER", "")
    if stop_after:
        name, kind = stop_after.split(":")

        def match(subject: str, events: Sequence[Event]) -> bool:
            return subject.endswith(f".{name}") and any(type(e).type_name() == kind for e in events)

        stop = StopAfterAppend(store, match)
    plan = msgspec.json.decode(os.environ["PLAN"], type=PodSchedulingInput)
    task = asyncio.create_task(held.engine.start(POD_SCHEDULING, saga_id, plan))
    if hold:
        await held.reached.wait()
        print(f"HELD {hold}", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        held.release()
    if stop_after:
        await asyncio.wait({task, asyncio.create_task(stop.landed.wait())}, return_when="FIRST_COMPLETED")
        if stop.landed.is_set():
            print("STOPPED", flush=True)
    state = await task  # hangs after STOPPED, until the test kills the process
    print(f"RESULT {state.status.value}", flush=True)
    await svc.snapshot.stop()
    await store.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
