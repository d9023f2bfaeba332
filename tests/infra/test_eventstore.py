"""The event store against a real nats-server: stream setup, OCC appends, de-duplication, reads."""

from __future__ import annotations

import asyncio

import pytest
from nats.js import api
from nats.js.errors import APIError

from draflow.events.codec import decode
from draflow.infra.config import Settings
from draflow.infra.errors import ConcurrencyError
from draflow.infra.eventstore import ERR_WRONG_LAST_SEQUENCE, AppendRequest, EventStore, acting_for
from draflow.infra.reader import CHAIN_LIMIT
from tests.widgets import Widget, WidgetCreated, WidgetResized, apply_widget


async def test_stream_config_and_idempotent_ensure(event_store: EventStore, settings: Settings) -> None:
    info = await event_store.js.stream_info(settings.stream)
    cfg = info.config
    assert cfg.storage == api.StorageType.FILE
    assert cfg.retention == api.RetentionPolicy.LIMITS
    assert cfg.deny_delete and cfg.deny_purge and cfg.allow_direct
    assert cfg.duplicate_window == settings.duplicate_window_s
    assert cfg.subjects == [f"{settings.root}.ev.>"]
    # a second service starting: same config, nothing changes, no error
    await event_store.ensure_stream()
    # a changed setting (duplicate window) is applied as an update
    other = await EventStore.open(
        Settings(
            nats_url=settings.nats_url,
            data_dir=settings.data_dir,
            stream=settings.stream,
            root=settings.root,
            duplicate_window_s=60.0,
        ),
        "other",
        nc=event_store.nc,
    )
    assert (await other.js.stream_info(settings.stream)).config.duplicate_window == 60.0
    dlq = await event_store.js.stream_info(settings.dlq_stream)
    assert dlq.config.subjects == [f"{settings.root}.dlq.>"]


async def test_stream_refuses_delete_and_purge(event_store: EventStore, settings: Settings) -> None:
    subject = event_store.subject("Widget", "default", "w")
    (seq,) = await event_store.append(subject, WidgetCreated(name="w"), expected_last_seq=0)
    with pytest.raises(APIError):
        await event_store.js.delete_msg(settings.stream, seq)
    with pytest.raises(APIError):
        await event_store.js.purge_stream(settings.stream)
    assert await event_store.last_seq(subject) == seq


async def test_append_returns_stream_sequences_and_load_folds(event_store: EventStore) -> None:
    a = event_store.subject("Widget", "default", "gpu.example.com")
    b = event_store.subject("Widget", "other", "b")
    assert a.endswith(".Widget.default.gpu~example~com")
    (s1,) = await event_store.append(a, WidgetCreated(name="gpu.example.com", size=1), expected_last_seq=0)
    (s2,) = await event_store.append(b, WidgetCreated(name="b", size=7), expected_last_seq=0)
    s3, s4 = await event_store.append(a, [WidgetResized(size=2), WidgetResized(size=3)], expected_last_seq=s1)
    assert (s1, s2, s3, s4) == (s1, s1 + 1, s1 + 2, s1 + 3)
    loaded = await event_store.load(a, apply_widget, None)
    assert loaded == (Widget(name="gpu.example.com", size=3, resizes=2), s4)
    last = await event_store.last(a)
    assert last is not None and last.seq == s4 and last.data == WidgetResized(size=3)
    assert last.id.endswith("#1") and last.actor == "test" and last.type == "WidgetResized"
    assert await event_store.last_seq(event_store.subject("Widget", "default", "missing")) == 0
    assert await event_store.last(event_store.subject("Widget", "default", "missing")) is None


async def test_the_actor_is_whose_request_it_serves(event_store: EventStore) -> None:
    """The Kubernetes API serves a user's request: what it appends names the user; an explicit
    actor (a kubelet's facts) still wins, and outside the request the store's own name is used."""
    subject = event_store.subject("Widget", "default", "w")
    token = acting_for.set("user:alice")
    try:
        (s1,) = await event_store.append(subject, WidgetCreated(name="w", size=1), expected_last_seq=0)
        (s2,) = await event_store.append(
            subject, WidgetResized(size=2), expected_last_seq=s1, actor="kubelet-node-1"
        )
    finally:
        acting_for.reset(token)
    await event_store.append(subject, WidgetResized(size=3), expected_last_seq=s2)
    actors = [env.actor async for batch in event_store.read(subject) for env in batch]
    assert actors == ["user:alice", "kubelet-node-1", "test"]


async def test_conflict_is_typed_and_writes_nothing(event_store: EventStore) -> None:
    subject = event_store.subject("Widget", "default", "w")
    (s1,) = await event_store.append(subject, WidgetCreated(name="w"), expected_last_seq=0)
    with pytest.raises(ConcurrencyError) as err:
        await event_store.append(subject, WidgetCreated(name="w"), expected_last_seq=0)
    assert err.value.subject == subject and err.value.expected_last_seq == 0
    # a stale writer's batch is refused as a whole (atomic)
    (s2,) = await event_store.append(subject, WidgetResized(size=1), expected_last_seq=s1)
    with pytest.raises(ConcurrencyError):
        await event_store.append(
            subject, [WidgetResized(size=5), WidgetResized(size=6)], expected_last_seq=s1
        )
    assert [e.seq for e in await event_store.events(subject)] == [s1, s2]


async def test_conflict_comes_from_the_error_code_not_the_text(event_store: EventStore) -> None:
    """The raw server answer carries err_code 10071; that is what the store maps."""
    subject = event_store.subject("Widget", "default", "w")
    await event_store.append(subject, WidgetCreated(name="w"), expected_last_seq=0)
    with pytest.raises(APIError) as raw:
        await event_store.js.publish(subject, b"{}", headers={"Nats-Expected-Last-Subject-Sequence": "0"})
    assert raw.value.err_code == ERR_WRONG_LAST_SEQUENCE


async def test_retried_append_is_deduplicated(event_store: EventStore) -> None:
    subject = event_store.subject("Widget", "default", "w")
    first = await event_store.append(subject, WidgetCreated(name="w"), expected_last_seq=0, msg_id="create-w")
    # the same append retried (its ack was lost): the server checks the expectation first, the
    # store recognises its own message right after the expected sequence and reports success
    again = await event_store.append(subject, WidgetCreated(name="w"), expected_last_seq=0, msg_id="create-w")
    assert again == first
    batch = [WidgetResized(size=1), WidgetResized(size=2)]
    seqs = await event_store.append(subject, batch, expected_last_seq=first[0], msg_id="resize-w")
    assert await event_store.append(subject, batch, expected_last_seq=first[0], msg_id="resize-w") == seqs
    # without an expectation, plain JetStream de-duplication answers with the original sequence
    other = event_store.subject("Widget", "default", "x")
    s = await event_store.append(other, WidgetCreated(name="x"), expected_last_seq=None, msg_id="create-x")
    assert (
        await event_store.append(other, WidgetCreated(name="x"), expected_last_seq=None, msg_id="create-x")
        == s
    )
    assert len(await event_store.events(subject)) == 3 and len(await event_store.events(other)) == 1


async def test_envelope_metadata_and_headers(event_store: EventStore) -> None:
    subject = event_store.subject("Widget", "default", "w")
    (s1,) = await event_store.append(
        subject, WidgetCreated(name="w"), expected_last_seq=0, correlation_id="req-1"
    )
    cause = await event_store.last(subject)
    assert cause is not None and cause.correlation_id == "req-1" and cause.causation_id == ""
    await event_store.append(subject, WidgetResized(size=2), expected_last_seq=s1, cause=cause)
    effect = await event_store.last(subject)
    assert effect is not None
    assert (effect.correlation_id, effect.causation_id) == ("req-1", cause.id)
    rec = await event_store.last_record(subject)
    assert rec is not None
    assert rec.header("Draflow-Type") == "WidgetResized" and rec.header("Draflow-Schema") == "1"
    assert rec.header("Nats-Msg-Id") == effect.id
    assert decode(rec.data, rec.seq) == effect


async def test_append_validation(event_store: EventStore) -> None:
    subject = event_store.subject("Widget", "default", "w")
    with pytest.raises(ValueError):
        await event_store.append(subject, [], expected_last_seq=0)
    with pytest.raises(ValueError):  # not a subject of this stream
        await event_store.append("elsewhere.x", WidgetCreated(name="w"), expected_last_seq=0)
    with pytest.raises(ValueError):
        await event_store.append(subject, [WidgetResized(size=1)] * 1001, expected_last_seq=None)


async def test_reads_in_order_across_strategies(event_store: EventStore) -> None:
    """Short aggregate, long aggregate (past the direct-get chain), long wildcard (consumer path)."""
    long_subject = event_store.subject("Widget", "default", "long")
    seqs = await event_store.append(long_subject, WidgetCreated(name="long"), expected_last_seq=0)
    n_long = CHAIN_LIMIT + 40
    for i in range(n_long - 1):
        seqs = await event_store.append(long_subject, WidgetResized(size=i), expected_last_seq=seqs[-1])
    reqs = [
        AppendRequest(event_store.subject("Widget", f"ns{i % 7}", f"w{i}"), [WidgetCreated(name=f"w{i}")], 0)
        for i in range(3000)
    ]
    results = await event_store.append_many(reqs)
    assert len(results) == 3000 and len({r[0] for r in results}) == 3000
    loaded = await event_store.load(long_subject, apply_widget, None)
    assert loaded.state is not None and loaded.state.resizes == n_long - 1 and loaded.version == seqs[-1]
    everything = await event_store.events(f"{event_store.root}.ev.>")
    assert [e.seq for e in everything] == list(range(1, n_long + 3000 + 1))
    ns3 = await event_store.events(f"{event_store.root}.ev.Widget.ns3.*")
    assert [e.data.name for e in ns3] == [f"w{i}" for i in range(3000) if i % 7 == 3]  # type: ignore[attr-defined]
    middle = [e.seq async for batch in event_store.read(None, 50, 80) for e in batch]
    assert middle == list(range(50, 81))
    batches = [len(b) async for b in event_store.read_raw(None, 1, batch=500)]
    assert sum(batches) == n_long + 3000


async def test_concurrent_writers_one_wins(event_store: EventStore) -> None:
    subject = event_store.subject("Widget", "default", "race")
    (s1,) = await event_store.append(subject, WidgetCreated(name="race"), expected_last_seq=0)

    async def writer(size: int) -> str:
        try:
            await event_store.append(subject, WidgetResized(size=size), expected_last_seq=s1)
            return "ok"
        except ConcurrencyError:
            return "conflict"

    outcomes = await asyncio.gather(*(writer(i) for i in range(10)))
    assert sorted(outcomes) == ["conflict"] * 9 + ["ok"]
