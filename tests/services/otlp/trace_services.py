"""Two tiny services for the trace viewer tests, exporting spans through the real foundation tracing.

``binder`` appends ``PodBound`` to ``Pod default/web`` inside a root span tagged with the pod (as
the scheduler's saga will be), correlated with a saga id; ``starter`` consumes it, runs a child
span that fails (status ERROR) and appends ``PodStarted`` caused by it. Each prints a line when
done and waits for SIGTERM.
"""

from __future__ import annotations

import sys

from opentelemetry.trace import Status, StatusCode

from draflow.events.dra import PodBound, PodStarted
from draflow.events.envelope import Envelope, Event
from draflow.events.saga import SagaStarted
from draflow.infra import tracing
from draflow.infra.consumer import ConsumerOptions, DurableConsumer, FunctionHandler
from draflow.infra.service import ServiceContext, run_service

POD = {"k8s.pod.name": "web", "k8s.namespace.name": "default"}


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

    consumer = DurableConsumer(
        ctx.store,
        "starter",
        [f"{ctx.store.root}.ev.Pod.>"],
        FunctionHandler(handle),
        ConsumerOptions(fetch_wait_s=0.2),
    )
    await consumer.run(ctx.stop)


if __name__ == "__main__":
    role = sys.argv[1]
    sys.exit(run_service(role, binder if role == "binder" else starter))
