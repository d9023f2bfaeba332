"""Tiny services for the tracing tests, run with the shared service runner and the real tracing:
``python -m tests.trace_services ROLE``. Each prints a line when done and then waits for SIGTERM,
so a test can check that spans are flushed on shutdown.

* ``producer`` appends one ``WidgetCreated`` inside a root span; ``reactor`` consumes it with a
  durable consumer and appends a follow-up event caused by it (``tests/infra/``).
* ``binder`` appends ``PodBound`` to ``Pod default/web`` inside a root span tagged with the pod (as
  the scheduler's saga is), correlated with a saga id; ``starter`` consumes it, runs a child span
  that fails (status ERROR) and appends ``PodStarted`` caused by it (the trace viewer's tests,
  ``tests/services/otlp/``).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from opentelemetry.trace import Status, StatusCode

from draflow.events.dra import PodBound, PodStarted
from draflow.events.envelope import Envelope, Event
from draflow.events.saga import SagaStarted
from draflow.infra import tracing
from draflow.infra.consumer import ConsumerOptions, DurableConsumer, FunctionHandler
from draflow.infra.service import ServiceContext, run_service
from tests.widgets import WidgetCreated, WidgetResized

POD = {"k8s.pod.name": "web", "k8s.namespace.name": "default"}


async def _follow(
    ctx: ServiceContext, name: str, kind: str, handle: Callable[[Envelope[Event]], Awaitable[None]]
) -> None:
    """Hand every event on ``kind``'s subjects to ``handle`` (a durable consumer) until SIGTERM."""
    consumer = DurableConsumer(
        ctx.store,
        name,
        [f"{ctx.store.root}.ev.{kind}.>"],
        FunctionHandler(handle),
        ConsumerOptions(fetch_wait_s=0.2),
    )
    await consumer.run(ctx.stop)


async def producer(ctx: ServiceContext) -> None:
    with tracing.span("apply widget"):
        subject = ctx.store.subject("Widget", "default", "traced")
        await ctx.store.append(subject, WidgetCreated(name="traced", size=1), expected_last_seq=0)
    print("APPENDED", flush=True)
    await ctx.stop.wait()


async def reactor(ctx: ServiceContext) -> None:
    async def handle(env: Envelope[Event]) -> None:
        if isinstance(env.data, WidgetCreated):
            await ctx.store.append(env.subject, WidgetResized(size=2), expected_last_seq=env.seq, cause=env)
            print("HANDLED", flush=True)

    await _follow(ctx, "reactor", "Widget", handle)


async def binder(ctx: ServiceContext) -> None:
    with tracing.span("saga PodScheduling", attributes={**POD, "draflow.saga.id": "sched-web"}):
        saga = ctx.store.subject("Saga", None, "sched-web")
        await ctx.store.append(saga, SagaStarted(saga_type="PodScheduling"), expected_last_seq=0)
        pod = ctx.store.subject("Pod", "default", "web")
        bound = PodBound(node_name="node-1")
        await ctx.store.append(pod, bound, expected_last_seq=0, correlation_id="sched-web")
    print("BOUND", flush=True)
    await ctx.stop.wait()


async def starter(ctx: ServiceContext) -> None:
    async def handle(env: Envelope[Event]) -> None:
        if isinstance(env.data, PodBound):
            with tracing.span("prepare devices", attributes=POD) as s:
                assert s is not None
                s.set_status(Status(StatusCode.ERROR, "device gpu-3 busy"))
            started = PodStarted(pod_ip="10.0.0.9")
            await ctx.store.append(env.subject, started, expected_last_seq=env.seq, cause=env)
            print("STARTED", flush=True)

    await _follow(ctx, "starter", "Pod", handle)


ROLES: dict[str, Callable[[ServiceContext], Coroutine[Any, Any, None]]] = {
    "producer": producer,
    "reactor": reactor,
    "binder": binder,
    "starter": starter,
}

if __name__ == "__main__":
    role = sys.argv[1]
    sys.exit(run_service(role, ROLES[role]))
