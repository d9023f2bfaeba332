"""One pod's journey is one trace across processes: the scheduler binds it (its PodScheduling saga's
trace travels with ``PodBound``), the kubelet of the node starts it inside that trace."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from draflow.infra.config import Settings
from draflow.services.apiserver.server import ApiServer
from draflow.services.claim_controller.service import ClaimControllerService
from draflow.services.drivers.gpu_example import DEVICE_CLASS_MANIFEST
from draflow.services.drivers.gpu_example.publisher import SlicePublisher
from tests.infra.test_tracing import Collector
from tests.processes import GPU_PLUGIN, Proc
from tests.services.test_shells import TEMPLATE_POD
from tests.shells import eventually, manifests, run, start_runtime

SPAN_KIND_CONSUMER = 5


@pytest.fixture
def collector() -> Iterator[Collector]:
    with Collector() as c:
        yield c


async def test_kubelet_starts_the_pod_in_the_schedulers_trace(
    apiserver: ApiServer, settings: Settings, collector: Collector
) -> None:
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    driver, _ = await run(settings, "driver", SlicePublisher)
    probe, events = await start_runtime(settings, "probe")
    procs = [
        Proc(settings, "draflow.services.kubelet", ["--node", "node-1"], env),
        Proc(settings, "draflow.services.scheduler", [], env),
        Proc(settings, GPU_PLUGIN, ["--node", "node-1"], env),
    ]
    try:
        await asyncio.to_thread(procs[0].expect, "kubelet node-1: registered")
        await eventually(lambda: probe.items("ResourceSlice"), what="slices")
        docs = manifests(DEVICE_CLASS_MANIFEST.read_text()) + manifests(TEMPLATE_POD)
        for result in await probe.api.apply(docs):
            assert result.error is None, result.error
        await eventually(
            lambda: (p := probe.get("Pod", "default", "pod0")) is not None and p.status.phase == "Running",
            timeout_s=60,
            what="pod Running",
        )
        bound = [
            e for e in await events.events(events.subject("Pod", "default", "pod0")) if e.type == "PodBound"
        ]
        assert bound and bound[0].traceparent, "the scheduler appends PodBound inside its saga's trace"
        trace_id = bound[0].traceparent.split("-")[1]

        def kubelet_span() -> list[dict[str, object]]:
            return collector.find(name="kubelet start pod", kind=SPAN_KIND_CONSUMER)

        await eventually(kubelet_span, timeout_s=20, what="the kubelet's span")
        # a start the kubelet refused (the plugin's registration still under way) is tried again:
        # one span per attempt, every one in the pod's trace
        assert {span["trace"] for span in kubelet_span()} == {trace_id}
        # the scheduler's process exports its spans in its own batches: wait for them too
        await eventually(
            lambda: any(s["trace"] == trace_id for s in collector.find(service="scheduler")),
            timeout_s=20,
            what="the scheduler's spans in the pod's trace",
        )
    finally:
        for p in procs:
            assert await asyncio.to_thread(p.terminate) == 0
        for s in (ctl, driver):
            await s.stop()
        await probe.stop()
        await events.close()
