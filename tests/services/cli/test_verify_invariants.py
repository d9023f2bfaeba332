"""``draflow verify-replay`` catches decisions that break Kubernetes' rules even when today's code
would take them too: the recorded log of issue 13 (a re-apply unbound running pod0, the claim
controller then released and freed its GPU, the scheduler bound it again), crafted with the event
store on a real nats-server, and each rule on its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from msgspec.structs import replace

from draflow.events.api.codec import encode_object
from draflow.events.api.core_v1 import Pod, PodResourceClaimStatus
from draflow.events.api.resource_v1 import (
    AllocationResult,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
    ResourceClaim,
    ResourceClaimConsumerReference,
)
from draflow.events.dra import (
    ClaimAllocated,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodBound,
    PodClaimStatusesRecorded,
    PodStarted,
)
from draflow.events.envelope import Event
from draflow.events.objects import object_applied
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.cli.invariants import BOUND_ONCE, KEEPS_CLAIMS
from draflow.services.cli.main import main
from draflow.services.cli.verify import verify_records
from draflow.services.runtime.client import ApiClient
from tests.builders import exact, make_claim, make_pod

pytestmark = pytest.mark.kep4381

NS = "default"
CLAIM = "pod0-gpu-x7k2p"
ALLOCATION = AllocationResult(
    devices=DeviceAllocationResult(
        results=(
            DeviceRequestAllocationResult(
                request="gpu", driver="gpu.example.com", pool="node-1", device="gpu-0"
            ),
        )
    )
)


async def _records(store: EventStore) -> list[Any]:
    out: list[Any] = []
    async for batch in store.read_raw():
        out.extend(batch)
    return out


async def _as(store: EventStore, actor: str, kind: str, name: str, events: list[Any]) -> int:
    """Append as ``actor`` would (its own connection, so the envelope names it); the first seq."""
    own = await EventStore.open(store.settings, actor)
    try:
        return (await own.append(own.subject(kind, NS, name), events, expected_last_seq=None))[0]
    finally:
        await own.close()


async def running_pod(api: ApiClient, store: EventStore) -> Pod:
    """pod0 with its template claim, allocated, reserved, bound to node-1 and Running."""
    (res,) = await api.apply(
        [encode_object(make_pod("pod0", template_claims={"gpu": "gpu-template"}, statuses={"gpu": CLAIM}))]
    )
    assert res.error is None, res.error
    pod = await api.get_object("Pod", "pod0", namespace=NS)
    assert isinstance(pod, Pod)
    (res,) = await api.apply([encode_object(make_claim(CLAIM, exact(), owner=pod))])
    assert res.error is None, res.error
    status = PodResourceClaimStatus(name="gpu", resource_claim_name=CLAIM)
    await _as(store, "claim-controller", "Pod", "pod0", [PodClaimStatusesRecorded(statuses=(status,))])
    consumer = ResourceClaimConsumerReference(resource="pods", name="pod0", uid=pod.metadata.uid)
    await _as(
        store,
        "scheduler",
        "ResourceClaim",
        CLAIM,
        [
            ClaimAllocated(allocation=ALLOCATION, node_name="node-1", pod_uid=pod.metadata.uid),
            ClaimReserved(consumer=consumer),
        ],
    )
    await _as(store, "scheduler", "Pod", "pod0", [PodBound(node_name="node-1")])
    await _as(store, "kubelet-node-1", "Pod", "pod0", [PodStarted(host_ip="10.0.0.1")])
    return pod


async def test_the_issue_13_log_breaks_the_binding_rule_at_the_apply(
    api: ApiClient, event_store: EventStore
) -> None:
    pod = await running_pod(api, event_store)
    clean = await _records(event_store)
    verifier, divergence = verify_records(clean, event_store.root)
    assert divergence is None, divergence
    assert verifier.invariants >= 1  # PodStarted on the bound pod

    # what the buggy apply stored: the manifest's spec (no nodeName), a new generation
    unbound = replace(pod, spec=replace(pod.spec, node_name=""), metadata=replace(pod.metadata, generation=2))
    applied_at = await _as(event_store, "apiserver", "Pod", "pod0", [object_applied(unbound)])
    await _as(
        event_store,
        "claim-controller",
        "ResourceClaim",
        CLAIM,
        [ClaimReservationsReleased(uids=(pod.metadata.uid,)), ClaimDeallocated(reason="NoConsumers")],
    )
    await _as(event_store, "scheduler", "Pod", "pod0", [PodBound(node_name="node-3")])

    _, divergence = verify_records(await _records(event_store), event_store.root)
    assert divergence is not None
    assert (divergence.seq, divergence.rule) == (applied_at, BOUND_ONCE)
    assert divergence.event == "PodApplied on Pod default/pod0 by apiserver"
    assert divergence.expected == {"spec.nodeName": "node-1"}
    assert divergence.actual == {"spec.nodeName": "", "generation": 2}


@pytest.mark.parametrize("written", ["a release, then the deallocation", "one deallocation"])
async def test_a_running_pods_claim_is_not_released(
    api: ApiClient, event_store: EventStore, written: str
) -> None:
    pod = await running_pod(api, event_store)
    uids = (pod.metadata.uid,)
    events: list[Event] = (
        [ClaimReservationsReleased(uids=uids), ClaimDeallocated(reason="NoConsumers")]
        if written.startswith("a release")
        else [ClaimDeallocated(reason="NoConsumers", released=uids)]
    )
    released_at = await _as(event_store, "claim-controller", "ResourceClaim", CLAIM, events)
    _, divergence = verify_records(await _records(event_store), event_store.root)
    assert divergence is not None and (divergence.seq, divergence.rule) == (released_at, KEEPS_CLAIMS)
    assert divergence.event == f"{events[0].type_name()} on ResourceClaim default/{CLAIM} by claim-controller"
    assert divergence.actual == {
        "pod": "default/pod0",
        "phase": "Running",
        "released": ["pod0"],
        "node": "node-1",
    }


async def test_a_bound_pod_is_not_bound_again(api: ApiClient, event_store: EventStore) -> None:
    await running_pod(api, event_store)
    again = await _as(event_store, "scheduler", "Pod", "pod0", [PodBound(node_name="node-1")])
    _, divergence = verify_records(await _records(event_store), event_store.root)
    assert divergence is not None and (divergence.seq, divergence.rule) == (again, BOUND_ONCE)
    assert divergence.actual == {"spec.nodeName": "node-1", "bind": "node-1"}
    # --from-seq past it: not checked
    _, divergence = verify_records(await _records(event_store), event_store.root, from_seq=again + 1)
    assert divergence is None


async def test_releasing_a_finished_or_deleting_pods_claim_is_fine(
    api: ApiClient, event_store: EventStore
) -> None:
    from draflow.events.dra import PodSucceeded

    pod = await running_pod(api, event_store)
    await _as(event_store, "kubelet-node-1", "Pod", "pod0", [PodSucceeded()])
    await _as(
        event_store,
        "claim-controller",
        "ResourceClaim",
        CLAIM,
        [ClaimReservationsReleased(uids=(pod.metadata.uid,)), ClaimDeallocated(reason="NoConsumers")],
    )
    verifier, divergence = verify_records(await _records(event_store), event_store.root)
    assert divergence is None, divergence
    assert verifier.invariants >= 3


async def test_the_command_names_the_rule(
    api: ApiClient,
    event_store: EventStore,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await running_pod(api, event_store)
    again = await _as(event_store, "scheduler", "Pod", "pod0", [PodBound(node_name="node-2")])
    monkeypatch.setenv("DRAFLOW_NATS_URL", settings.nats_url)
    monkeypatch.setenv("DRAFLOW_STREAM", settings.stream)
    monkeypatch.setenv("DRAFLOW_SUBJECT_ROOT", settings.root)
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["verify-replay"])
    out, err = capsys.readouterr()
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"DIVERGED at seq {again}: PodBound on Pod default/pod0 by scheduler"
    assert f"  rule broken: {BOUND_ONCE}" in lines
    assert '  actual (recorded): {"bind": "node-2", "spec.nodeName": "node-1"}' in lines
    assert "breaks an invariant" in err


def test_a_claim_reserved_for_a_pod_that_does_not_use_it_may_go() -> None:
    from draflow.services.cli.invariants import released_running_pod

    pod = make_pod("pod0", phase="Running", node_name="node-1")
    claim = make_claim("other", exact(), reserved_for=[pod])
    assert isinstance(claim, ResourceClaim)
    assert released_running_pod(claim, (pod.metadata.uid,), {"pod0": pod}) is None
