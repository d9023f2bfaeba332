"""The logs bench.history builds hold what a running system would hold: copied lifecycles leave
no live object behind (their Kubernetes Events go with their namespace, as the apiserver's
namespace controller deletes them), so a service's start from a snapshot does the same work at
every log length (counted in objects and events, not seconds)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bench.history import grow
from bench.lifecycles import DEFAULT_RECORDING, UnitCopier, copy_unit, live_events, load_recording
from draflow.events.api.codec import object_meta
from draflow.events.codec import HDR_TYPE, decode
from draflow.events.objects import EVENT_KIND
from draflow.infra.eventstore import EventStore
from draflow.infra.natsd import LocalNatsServer
from draflow.infra.publisher import HDR_EXPECTED_LAST_SUBJECT_SEQ
from draflow.infra.snapshots import SnapshotPolicy
from draflow.projections.objects import ObjectIndex
from draflow.services.runtime.store import ApiStore
from tests.builders.history import snapshot_at
from tests.conftest import settings_for


def _fold(copies: int, *, drain: bool = True) -> ObjectIndex:
    """The objects left by the set-up and ``copies`` copies of the unit, folded as every store
    folds them (``drain=False``: the recording's unit as it was recorded)."""
    rec = load_recording(DEFAULT_RECORDING)
    if not drain:
        rec = replace(rec, unit=[m for m in rec.unit if m.headers[HDR_TYPE] != "KubeEventDeleted"])
    messages = list(rec.setup)
    copier = UnitCopier(rec)
    for copy in range(copies):
        messages += copier.copy(copy, len(messages) + 1)
    index = ObjectIndex()
    for seq, m in enumerate(messages, 1):
        subject = m.subject.format(root="r")
        _, _, kind, ns, name = subject.split(".", 4)
        env = decode(m.payload.replace("{root}", "r").encode(), seq)
        index.apply_envelope(kind, "" if ns == "_" else ns, name, env)
    index.settle(len(messages))  # as every store does after a batch: deleted objects' versions go
    return index


def test_copied_lifecycles_leave_no_live_events_or_objects() -> None:
    one, many = _fold(1), _fold(40)
    assert many.items(EVENT_KIND) == []
    assert many.sizes() == one.sizes()  # the set-up's objects, whatever the number of copies
    assert many.items("Pod") == many.items("ResourceClaim") == []
    assert not any(object_meta(ns).name.startswith("churn-") for ns in many.items("Namespace"))
    # the recording as recorded (before Events went with their namespace) leaves them alive
    assert (
        len(_fold(40, drain=False).items(EVENT_KIND)) == 40 * len(_fold(1, drain=False).items(EVENT_KIND)) > 0
    )


def test_the_drain_deletes_each_event_at_the_version_it_was_last_written() -> None:
    rec = load_recording(DEFAULT_RECORDING)
    deletions = [m for m in rec.unit if m.headers[HDR_TYPE] == "KubeEventDeleted"]
    assert deletions and live_events(rec.unit, rec.first_seq) == {}
    recorded = {
        m.subject: rec.first_seq + i
        for i, m in enumerate(rec.unit)
        if m.headers[HDR_TYPE] == "KubeEventRecorded"
    }
    assert {m.subject: int(m.headers[HDR_EXPECTED_LAST_SUBJECT_SEQ]) for m in deletions} == recorded
    assert rec.unit[-1].headers[HDR_TYPE] == "NamespaceDeleted"  # the namespace goes last
    # each copy expects the versions of its own Events
    base = 5000
    copied = copy_unit(rec, 3, base)
    assert copied == UnitCopier(rec).copy(3, base)
    for m in copied:
        if m.headers[HDR_TYPE] == "KubeEventDeleted":
            recorded_at = int(m.headers[HDR_EXPECTED_LAST_SUBJECT_SEQ]) - base
            assert copied[recorded_at].subject == m.subject
            assert copied[recorded_at].headers[HDR_TYPE] == "KubeEventRecorded"


async def _start_work(events: EventStore, *, snapshot: bool) -> tuple[int, int]:
    """(changes a store started on the log was told: restored objects and folded events, the
    objects it holds)."""
    store = ApiStore(events, policy=SnapshotPolicy(load=snapshot, every_events=0, every_s=0))
    changes = [0]
    store.listen(lambda kind, ns, name, change: changes.__setitem__(0, changes[0] + 1))
    await store.start(timeout_s=60)
    try:
        return changes[0], store.index.size()
    finally:
        await store.stop()


async def test_a_start_from_a_snapshot_does_the_same_work_at_every_log_length(
    nats_server: LocalNatsServer, tmp_path: Path
) -> None:
    rec = load_recording(DEFAULT_RECORDING)
    work: dict[int, tuple[int, int]] = {}
    whole: dict[int, tuple[int, int]] = {}
    for target in (1_000, 6_000):
        events = await EventStore.open(settings_for(nats_server, tmp_path / str(target)), "test")
        try:
            length = await grow(events, rec, target)  # the log the bench builds, stored for real
            await snapshot_at(events, length)
            work[target] = await _start_work(events, snapshot=True)
            whole[target] = await _start_work(events, snapshot=False)
        finally:
            await events.close()
    # the same live objects and the same changes to fold, six times the history
    assert work[1_000] == work[6_000], work
    assert work[6_000][0] == work[6_000][1] == len(rec.setup)
    # what the count is checked against: folding the whole log grows with it
    assert whole[6_000][0] > 5 * whole[1_000][0] > work[6_000][0]
    assert whole[6_000][1] == work[6_000][1]
