"""Two writers race on one object through the real apiserver: apply decides again on a conflict.

The apiserver decides a manifest on its in-memory copy and appends at that copy's version; an
append refused because someone wrote the object in between (a controller, or a user whose apply
another apiserver replica served) is decided again on the object as it now is. The users see
kubectl's outcomes: both applies succeed (the later one on top of the earlier, ``unchanged`` when
it asks for nothing new), and an object that keeps changing under the apply gets kubectl's 409.
The writes are injected between the apiserver's decision and its append, deterministically; the
user side is the real ``draflow apply`` process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from events.api.resource_v1 import ResourceClaim, ResourceClaimConsumerReference
from events.dra import ClaimAllocated, ClaimReserved
from events.envelope import Envelope, Event
from events.objects import decode_stored
from infra.config import Settings
from infra.eventstore import EventStore
from projections.objects import fold
from services.apiserver.apply import MAX_ATTEMPTS
from services.apiserver.server import ApiServer
from services.runtime.client import ApiClient
from services.runtime.protocol import ApplyItem, ApplyRequest
from tests.debugging.cli import draflow
from tests.scheduler.builders import allocation_on

CONFLICT = (
    'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "c": '
    "the object has been modified; please apply your changes to the latest version and try again"
)


def _claim(labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c", "namespace": "default"}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }


class Interposed:
    """Runs ``inject`` right before the apiserver's appends to the claim's subject are sent (the
    first one only, or every one): someone else's write between its decision and its append.
    ``shared`` counts the injections across several interposed replicas."""

    def __init__(
        self,
        server: ApiServer,
        subject: str,
        inject: Callable[[], Awaitable[None]],
        *,
        every: bool,
        shared: list[int] | None = None,
    ) -> None:
        self.shared = shared if shared is not None else [0]
        events = server.events
        real_append, real_many = events.append, events.append_many

        async def before(subjects: Sequence[str]) -> None:
            if subject in subjects and (every or self.shared[0] == 0):
                self.shared[0] += 1
                await inject()

        async def append(subj: str, evs: Event | Sequence[Event], **kw: Any) -> tuple[int, ...]:
            await before([subj])
            seqs: tuple[int, ...] = await real_append(subj, evs, **kw)
            return seqs

        async def append_many(requests: Any, **kw: Any) -> list[Any]:
            reqs = list(requests)
            await before([r.subject for r in reqs])
            out: list[Any] = await real_many(reqs, **kw)
            return out

        events.append = append  # type: ignore[method-assign,assignment]
        events.append_many = append_many  # type: ignore[method-assign]

    @property
    def calls(self) -> int:
        return self.shared[0]


async def _history(store: EventStore) -> list[Envelope[Event]]:
    return await store.events(store.subject("ResourceClaim", "default", "c"))


async def _apply_file(settings: Settings, tmp_path: Path, manifest: dict[str, Any]) -> tuple[int, str, str]:
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(manifest))
    r = await asyncio.to_thread(draflow, settings, "apply", "-f", str(path))
    return r.returncode, r.stdout, r.stderr


async def _read(api: ApiClient, at_least: int) -> ResourceClaim:
    """The claim as the apiserver serves it once it has folded the log up to ``at_least``."""
    got = decode_stored(
        await api.get("ResourceClaim", "c", namespace="default", min_resource_version=at_least)
    )
    assert isinstance(got, ResourceClaim)
    return got


async def _created(api: ApiClient) -> ResourceClaim:
    (result,) = await api.apply([_claim()])
    assert result.error is None and result.outcome == "created", result
    # at the version written: with two replicas the other may not have folded it yet
    return await _read(api, int(result.resource_version))


async def test_a_controller_write_between_decision_and_append_is_kept(
    apiserver: ApiServer, api: ApiClient, event_store: EventStore, settings: Settings, tmp_path: Path
) -> None:
    """The user labels the claim while the scheduler allocates and reserves it: the label's first
    append is refused, the apply is decided again on the allocated claim and lands on top; the
    scheduler's status is not overwritten with the stale copy."""
    created = await _created(api)
    subject = event_store.subject("ResourceClaim", "default", "c")

    async def scheduler() -> None:
        consumer = ResourceClaimConsumerReference(resource="pods", name="p", uid="uid-p")
        await event_store.append(
            subject,
            [ClaimAllocated(allocation=allocation_on("node-0", "dev-0")), ClaimReserved(consumer=consumer)],
            expected_last_seq=None,
            correlation_id="scheduler-ps-p",
        )

    interposed = Interposed(apiserver, subject, scheduler, every=False)
    code, out, err = await _apply_file(settings, tmp_path, _claim({"team": "ml"}))
    assert (code, out, err) == (0, "resourceclaim.resource.k8s.io/c configured\n", "")
    assert interposed.calls == 1
    history = await _history(event_store)
    assert [e.type for e in history] == [
        "ResourceClaimApplied",
        "ClaimAllocated",
        "ClaimReserved",
        "ResourceClaimApplied",  # once: the refused append stored nothing
    ]
    claim = await _read(api, history[-1].seq)
    assert isinstance(claim, ResourceClaim)
    assert claim.metadata.labels == {"team": "ml"} and claim.metadata.uid == created.metadata.uid
    assert claim.status.allocation is not None and [r.uid for r in claim.status.reserved_for] == ["uid-p"]
    assert claim.metadata.resource_version == str(history[-1].seq)


@pytest.fixture
async def replica(event_store: EventStore, apiserver: ApiServer) -> AsyncIterator[ApiServer]:
    """A second apiserver on the same log and request queue group (requests go to either)."""
    events = await EventStore.open(event_store.settings, "apiserver-b")
    server = ApiServer(events)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        await events.close()


@pytest.mark.parametrize(("mine", "theirs", "outcome"), [("a", "b", "configured"), ("a", "a", "unchanged")])
async def test_two_users_apply_through_two_apiservers_at_once(
    apiserver: ApiServer,
    replica: ApiServer,
    api: ApiClient,
    event_store: EventStore,
    settings: Settings,
    tmp_path: Path,
    mine: str,
    theirs: str,
    outcome: str,
) -> None:
    """My ``draflow apply`` is decided by one replica; before its append, another user's apply of
    the same claim is served by the other replica and lands first. Mine is refused at the version
    it was decided on, decided again on top of theirs and lands: both users see ``configured``
    (or mine ``unchanged`` when theirs already made the same change) and mine is the last word."""
    await _created(api)
    last = await event_store.stream_last_seq()
    for server in (apiserver, replica):
        await server.store.wait_position(last)
    subject = event_store.subject("ResourceClaim", "default", "c")
    theirs_results: list[Any] = []

    def other_user(server: ApiServer) -> Callable[[], Awaitable[None]]:
        async def run() -> None:  # served by the replica that did not take my request
            other = replica if server is apiserver else apiserver
            req = ApplyRequest(items=[ApplyItem(manifest=_claim({"team": theirs}), source="theirs.yaml")])
            reply = await other._apply(req, create_only=False)
            theirs_results.extend(reply.results or [])

        return run

    once: list[int] = [0]  # one injection in all: the other user's own append is not interposed
    Interposed(apiserver, subject, other_user(apiserver), every=False, shared=once)
    Interposed(replica, subject, other_user(replica), every=False, shared=once)
    code, out, err = await _apply_file(settings, tmp_path, _claim({"team": mine}))
    assert (code, out, err) == (0, f"resourceclaim.resource.k8s.io/c {outcome}\n", "")
    (their,) = theirs_results
    assert their.error is None and their.outcome == "configured", their
    applied = [e for e in await _history(event_store) if e.type == "ResourceClaimApplied"]
    # created, theirs, and mine on top (not at all when it changed nothing)
    assert len(applied) == (3 if outcome == "configured" else 2)
    assert applied[1].seq == int(their.resource_version)
    claim = await _read(api, applied[-1].seq)
    assert isinstance(claim, ResourceClaim) and claim.metadata.labels == {"team": mine}


async def test_an_object_that_keeps_changing_gets_kubectls_conflict(
    apiserver: ApiServer, api: ApiClient, event_store: EventStore, settings: Settings, tmp_path: Path
) -> None:
    """A controller writes the claim between every decision and its append: after its attempts the
    apply gives up with the apiserver's 409, which ``draflow apply`` prints as kubectl does; the
    refused manifest appended nothing."""
    await _created(api)
    subject = event_store.subject("ResourceClaim", "default", "c")
    n = 0

    async def controller() -> None:  # allocates the claim, then reserves it for pod after pod
        nonlocal n
        n += 1
        consumer = ResourceClaimConsumerReference(resource="pods", name=f"p{n}", uid=f"uid-p{n}")
        event: Event = (
            ClaimAllocated(allocation=allocation_on("node-0", "dev-0"))
            if n == 1
            else ClaimReserved(consumer=consumer)
        )
        await event_store.append(subject, event, expected_last_seq=None)

    interposed = Interposed(apiserver, subject, controller, every=True)
    code, out, err = await _apply_file(settings, tmp_path, _claim({"team": "ml"}))
    path = tmp_path / "claim.yaml"
    assert (code, out) == (1, "")
    assert err == f'Error from server (Conflict): error when patching "{path}": {CONFLICT}\n'
    assert interposed.calls > MAX_ATTEMPTS  # the pipelined first try, then every attempt again
    history = await _history(event_store)
    assert [e.type for e in history] == [
        "ResourceClaimApplied",
        "ClaimAllocated",
        *["ClaimReserved"] * (interposed.calls - 1),
    ]
    claim = await _read(api, history[-1].seq)
    assert isinstance(claim, ResourceClaim) and claim.metadata.labels == {}


@pytest.mark.parametrize("verb", ["create", "apply"])
async def test_a_create_racing_another_create(
    apiserver: ApiServer, event_store: EventStore, settings: Settings, tmp_path: Path, verb: str
) -> None:
    """My create was decided; before its append someone else created the claim. Decided again:
    ``draflow create`` is refused as kubectl's create is (``AlreadyExists``, nothing appended);
    ``draflow apply`` updates the object the other one created."""
    subject = event_store.subject("ResourceClaim", "default", "c")

    async def someone_creates() -> None:
        other = ApplyRequest(items=[ApplyItem(manifest=_claim({"team": "theirs"}))])
        reply = await apiserver.applier.apply(other, create_only=True)
        assert reply[0].outcome == "created", reply

    Interposed(apiserver, subject, someone_creates, every=False)
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(_claim({"team": "mine"})))
    r = await asyncio.to_thread(draflow, settings, verb, "-f", str(path))
    history = await _history(event_store)
    stored = None
    for e in history:
        stored = fold(stored, e.type, e.data, e.seq)
    assert isinstance(stored, ResourceClaim)
    if verb == "create":
        assert (r.returncode, r.stdout) == (1, "")
        assert r.stderr == (
            f'Error from server (AlreadyExists): error when creating "{path}": '
            'resourceclaims.resource.k8s.io "c" already exists\n'
        )
        assert len(history) == 1 and stored.metadata.labels == {"team": "theirs"}
    else:
        assert (r.returncode, r.stdout, r.stderr) == (0, "resourceclaim.resource.k8s.io/c configured\n", "")
        assert [e.type for e in history] == ["ResourceClaimApplied"] * 2
        assert stored.metadata.labels == {"team": "mine"}
