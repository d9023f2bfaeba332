"""What one bound pod costs the PodScheduling saga in the log: five single appends, no atomic
batch (JetStream stages each batch in a file store of its own: 12-30 ms on this machine)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.envelope import Event
from draflow.sagas.engine import SagaStatus
from draflow.services.scheduler.framework import Reserved
from draflow.services.scheduler.sagas.pod_scheduling import POD_SCHEDULING, PodSchedulingInput
from tests.services.scheduler.service.conftest import Cluster
from tests.services.scheduler.service.scenario import Instances, everything

pytestmark = pytest.mark.kep4381


async def test_a_bound_pod_is_five_saga_appends_none_of_them_a_batch(
    cluster: Cluster, instances: Instances
) -> None:
    await cluster.nodes(1, devices=2)
    await cluster.pod("p1")
    a = await instances.start("scheduler-a")
    sent: list[tuple[str, int]] = []  # (subject, messages) of every append the instance sends
    real = a.store.append

    async def counting(subject: str, events: Event | Sequence[Event], **kw: Any) -> tuple[int, ...]:
        n = 1 if isinstance(events, Event) else len(events)
        sent.append((subject, n + len(kw.get("guards", ()))))
        seqs: tuple[int, ...] = await real(subject, events, **kw)
        return seqs

    a.store.append = counting  # type: ignore[method-assign]
    await a.snapshot.wait_position(await a.store.stream_last_seq())
    pod, _ = a.get("Pod", "default", "p1")
    assert isinstance(pod, Pod)
    result = a.core.schedule(pod)
    assert isinstance(result, Reserved)
    state = await a.engine.start(POD_SCHEDULING, "ps-p1", PodSchedulingInput.of(result, a.snapshot.stamp))
    assert state.status is SagaStatus.COMPLETED, state.error
    mine = [e for e in await everything(cluster) if e.correlation_id == "ps-p1"]
    assert [e.type for e in mine] == [
        "SagaStarted",
        "GuardTaken",
        "ClaimAllocated",
        "PodBound",
        "SagaCompleted",
    ]
    assert [n for _, n in sent] == [1] * 5, sent
    (allocated,) = [e.data for e in mine if e.type == "ClaimAllocated"]
    assert allocated.consumer is not None and allocated.consumer.uid == pod.metadata.uid  # type: ignore[attr-defined]
    claim = await cluster.claim("p1-gpu")
    assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid]
