"""Claim update conflicts at PreBind, injected deterministically between the saga's read of the
claim and its optimistic append: a harmless change (label) is reloaded and retried, an allocation
by someone else is compensated and the pod requeued."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.dra import ClaimAllocated
from draflow.events.envelope import Event
from draflow.infra.config import Settings
from tests.builders import make_allocation
from tests.helpers import assert_eventually
from tests.services.scheduler.service.conftest import Cluster
from tests.services.scheduler.service.test_races import _draflow_log

pytestmark = pytest.mark.kep4381


@pytest.mark.parametrize("change", ["label", "allocated-elsewhere"])
async def test_claim_changed_under_prebind(cluster: Cluster, settings: Settings, change: str) -> None:
    await cluster.nodes(1, devices=2)
    pod, claim_name = await cluster.pod("pod-0")
    svc = await cluster.make()
    claim_subject = cluster.store.subject("ResourceClaim", "default", claim_name)
    real_append = svc.store.append
    injected: list[str] = []

    async def append(subject: str, events: Event | Sequence[Event], **kw: Any) -> tuple[int, ...]:
        # the first PreBind append of the claim: change the claim first, then append at the
        # version the saga read — JetStream must refuse it
        batch = list(events) if isinstance(events, Sequence) else [events]
        if subject == claim_subject and not injected and any(isinstance(e, ClaimAllocated) for e in batch):
            planned = next(e for e in batch if isinstance(e, ClaimAllocated))
            if change == "label":
                claim = await cluster.claim(claim_name)
                meta = msgspec.structs.replace(claim.metadata, labels={"team": "ml"}, resource_version="")
                await cluster.apply(msgspec.structs.replace(claim, metadata=meta))
                injected.append("label")
            else:
                (result,) = planned.allocation.devices.results
                other = "dev-1" if result.device == "dev-0" else "dev-0"
                await cluster.store.append(
                    claim_subject,
                    ClaimAllocated(allocation=make_allocation(other, node="node-0"), node_name="node-0"),
                    expected_last_seq=None,
                    correlation_id="other-scheduler",
                )
                injected.append(other)
        return await real_append(subject, events, **kw)

    svc.store.append = append  # type: ignore[method-assign]
    cluster.run(svc)

    async def bound() -> Pod:
        p = await cluster.get_pod("pod-0")
        assert p.spec.node_name == "node-0"
        return p

    await assert_eventually(bound, timeout_s=20)
    assert injected, "the PreBind append was never intercepted"
    await assert_eventually(lambda: svc.outcomes["completed"] == 1, timeout_s=10)

    # exactly one allocation, one device, reserved by the pod; nothing leaked
    claim = await cluster.claim(claim_name)
    alloc = claim.status.allocation
    assert alloc is not None and len(alloc.devices.results) == 1
    assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid]
    history = await cluster.store.events(claim_subject)
    allocated = [e for e in history if isinstance(e.data, ClaimAllocated)]
    assert len(allocated) == 1, [e.type for e in history]
    saga_log = await _draflow_log(settings, "Saga._.>")
    saga_types = [ln.split()[3] for ln in saga_log.splitlines() if "-ps-" in ln]
    claim_log = await _draflow_log(settings, f"ResourceClaim.default.{claim_name}")
    claim_types = [ln.split()[3] for ln in claim_log.splitlines()[1:] if ln.strip()]

    if change == "label":
        # reloaded and retried inside the step: the saga's own allocation, second attempt's id
        assert claim.metadata.labels == {"team": "ml"}
        assert allocated[0].correlation_id.startswith("scheduler-ps-")
        assert allocated[0].id.split("#")[0].endswith(f"{claim_name}:1"), allocated[0].id
        assert svc.outcomes == {"completed": 1, "compensated": 0, "failed": 0, "unschedulable": 0}
        assert "SagaStepFailed" not in saga_types and saga_types[-1] == "SagaCompleted", saga_log
        # the trail: the foreign change lands between the saga's read and its allocation
        i = claim_types.index("ClaimAllocated")
        assert i > 0 and claim_types[i - 1] not in ("ClaimAllocated", "ClaimReserved"), claim_log
    else:
        # the allocation written by someone else wins; this saga compensates and the requeued
        # pod is bound using that allocation (reserve only, no second ClaimAllocated)
        assert alloc.devices.results[0].device == injected[0]
        assert allocated[0].correlation_id == "other-scheduler"
        assert svc.outcomes["compensated"] == 1 and svc.outcomes["failed"] == 0
        first = saga_types[: saga_types.index("SagaCompensated") + 1]
        assert first[0] == "SagaStarted" and "SagaStepFailed" in first, saga_log
        assert first[-3:] == ["SagaStepCompensated", "SagaStepCompensated", "SagaCompensated"], saga_log
        assert saga_types[-1] == "SagaCompleted", saga_log
        assert claim_types.count("ClaimAllocated") == 1 and "ClaimDeallocated" not in claim_types, claim_log
