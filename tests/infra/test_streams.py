"""The stream configurations on a real server: S2 compression, and logs written before it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

from nats.js import api

from draflow.events.codec import decode
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.natsd import LocalNatsServer, stream_disk_bytes
from draflow.infra.streams import event_stream_config
from tests.conftest import settings_for
from tests.helpers import assert_eventually
from tests.paths import GOLDEN
from tests.widgets import WidgetCreated


def _golden(settings: Settings, copies: int) -> Iterator[tuple[str, bytes]]:
    """The recorded log's events on this test's root, ``copies`` times over (other names each time)."""
    lines = (GOLDEN / "basic-claim-template.jsonl").read_text().splitlines()[1:]
    for copy in range(copies):
        for line in lines:
            rec = json.loads(line)
            subject = f"{settings.root}.{rec['subject'].split('.', 1)[1]}-c{copy}"
            env = dict(rec["envelope"], subject=subject, id=f"{rec['envelope']['id']}-c{copy}")
            yield subject, json.dumps(env, separators=(",", ":")).encode()


async def _publish(store: EventStore, settings: Settings, copies: int) -> int:
    """Stored without waiting for each ack (a bulk load), then waits until the stream has them all."""
    n = 0
    for subject, payload in _golden(settings, copies):
        await store.nc.publish(subject, payload)
        n += 1
    await store.nc.flush()

    async def stored() -> bool:
        return (await store.js.stream_info(settings.stream)).state.messages >= n

    await assert_eventually(stored, timeout_s=30, interval_s=0.05)
    return n


async def _read_all(store: EventStore) -> list[tuple[int, str]]:
    return [(env.seq, env.id) for env in await store.events(store.all_events)]


async def test_the_log_is_stored_compressed(event_store: EventStore, settings: Settings) -> None:
    info = await event_store.js.stream_info(settings.stream)
    assert info.config.compression == api.StoreCompression.S2
    dlq = await event_store.js.stream_info(settings.dlq_stream)
    assert dlq.config.compression == api.StoreCompression.S2


async def test_a_log_written_uncompressed_stays_readable(
    own_nats_server: LocalNatsServer, tmp_path: Path
) -> None:
    """A stream created before compression was on: the next service start turns it on by an
    update, the old events read back the same (before and after the server seals its blocks),
    and appends go on."""
    settings = settings_for(own_nats_server, tmp_path / "data")
    old = await EventStore.open(settings, "old", ensure=False)
    plain = dataclasses.replace(event_stream_config(settings), compression=api.StoreCompression.NONE)
    await old.js.add_stream(plain)
    n = await _publish(old, settings, copies=3)
    before = await _read_all(old)
    assert len(before) == n
    await old.close()

    store = await EventStore.open(settings, "new")  # ensure_stream: the update
    try:
        assert (await store.js.stream_info(settings.stream)).config.compression == api.StoreCompression.S2
        assert await _read_all(store) == before
        subject = store.subject("Widget", "default", "after")
        (seq,) = await store.append(subject, WidgetCreated(name="after"), expected_last_seq=0)
        assert seq == n + 1
    finally:
        await store.close()

    own_nats_server.stop()
    own_nats_server.start()  # blocks sealed (and compressed) at the restart
    store = await EventStore.open(settings, "again")
    try:
        after = await _read_all(store)
        assert after[:n] == before and len(after) == n + 1
        last = await store.last_record(store.subject("Widget", "default", "after"))
        assert last is not None and decode(last.data, last.seq).data == WidgetCreated(name="after")
    finally:
        await store.close()


async def test_compression_shrinks_the_log_on_disk(
    own_nats_server: LocalNatsServer, tmp_path: Path
) -> None:
    """The same recorded events in a plain and a compressed stream: JetStream compresses a block
    once it is full (8 MB for a stream without limits) and writes the next one plain, so the
    first block of the compressed stream is a fraction of the plain one's."""
    compressed = settings_for(own_nats_server, tmp_path / "a")
    plain = settings_for(own_nats_server, tmp_path / "b")
    store = await EventStore.open(compressed, "c")
    try:
        await store.js.add_stream(
            dataclasses.replace(event_stream_config(plain), compression=api.StoreCompression.NONE)
        )
        n = await _publish(store, compressed, copies=400)
        assert await _publish(store, plain, copies=400) == n
    finally:
        await store.close()
    small = stream_disk_bytes(own_nats_server.store_dir, compressed.stream)
    large = stream_disk_bytes(own_nats_server.store_dir, plain.stream)
    assert large > 500 * n  # the recorded events are ~600 bytes each (without headers)
    sealed_small = _blocks(own_nats_server.store_dir, compressed.stream)[0]
    sealed_large = _blocks(own_nats_server.store_dir, plain.stream)[0]
    assert sealed_large > 7_000_000
    assert sealed_small < sealed_large / 2
    assert large - small > sealed_large / 2


def _blocks(store_dir: Path, stream: str) -> list[int]:
    """The sizes of a stream's message blocks, oldest first."""
    (msgs,) = store_dir.glob(f"jetstream/*/streams/{stream}/msgs")
    files = sorted(msgs.glob("*.blk"), key=lambda f: int(f.stem))
    return [f.stat().st_size for f in files]
