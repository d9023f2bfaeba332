"""Two tiny services for the tracing test, run with the shared service runner.

``producer`` appends one ``WidgetCreated`` inside a root span; ``reactor`` consumes it with a
durable consumer and appends a follow-up event caused by it. Both print a line when done and then
wait for SIGTERM, so the test can check that spans are flushed on shutdown.
"""

from __future__ import annotations

import sys

from draflow.events.envelope import Envelope, Event
from draflow.infra import tracing
from draflow.infra.consumer import ConsumerOptions, DurableConsumer, FunctionHandler
from draflow.infra.service import ServiceContext, run_service
from tests.widgets import WidgetCreated, WidgetResized


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

    consumer = DurableConsumer(
        ctx.store,
        "reactor",
        [f"{ctx.store.root}.ev.Widget.>"],
        FunctionHandler(handle),
        ConsumerOptions(fetch_wait_s=0.2),
    )
    await consumer.run(ctx.stop)


if __name__ == "__main__":
    role = sys.argv[1]
    sys.exit(run_service(role, producer if role == "producer" else reactor))
