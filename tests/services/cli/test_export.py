"""``draflow export`` / ``import``: a run attached to a bug report is replayed exactly elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from draflow.events.dra import PodBound, PodStarted
from draflow.events.saga import SagaCompleted, SagaStarted, SagaStepCompleted
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.natsd import LocalNatsServer
from tests.processes import draflow


async def _seed(store: EventStore) -> None:
    pod = store.subject("Pod", "default", "web.1")
    saga = store.subject("Saga", None, "sched-web-1")
    await store.append(saga, SagaStarted(saga_type="PodScheduling", steps=["bind"]), expected_last_seq=0)
    await store.append(pod, PodBound(node_name="node-1"), expected_last_seq=0, msg_id="bind:web.1")
    await store.append(saga, [SagaStepCompleted(step="bind", index=0), SagaCompleted()], expected_last_seq=1)
    await store.append(pod, PodStarted(pod_ip="10.0.0.7"), expected_last_seq=2)
    # not an envelope (published by hand): exported and imported as it is, so a replay meets it too
    junk = store.subject("Pod", "default", "junk")
    await store.js.publish(junk, b"\x00{not json", headers={"Nats-Msg-Id": "j"})


def _events(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines[1:]]


def _with_root(settings: Settings, server: LocalNatsServer) -> Settings:
    return msgspec.structs.replace(settings, nats_url=server.url)


async def test_export_import_round_trip(
    event_store: EventStore, settings: Settings, own_nats_server: LocalNatsServer, tmp_path: Path
) -> None:
    await _seed(event_store)
    first = tmp_path / "log.jsonl"
    r = draflow(settings, "export", "-o", str(first))
    assert r.returncode == 0, r.stderr
    assert "exported 6 events" in r.stderr
    header = json.loads(first.read_text().splitlines()[0])
    assert header["stream"] == settings.stream and header["count"] == 6
    exported = _events(first)
    assert [e["seq"] for e in exported] == [1, 2, 3, 4, 5, 6]
    assert exported[1]["headers"]["Nats-Msg-Id"] == "bind:web.1"
    assert exported[1]["envelope"]["data"] == {"type": "PodBound", "node_name": "node-1", "at": ""}
    assert "envelope" not in exported[5] and exported[5]["data_b64"] == "AHtub3QganNvbg=="

    fresh = _with_root(settings, own_nats_server)
    r = draflow(fresh, "import", str(first))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "imported 6 events"
    second = tmp_path / "again.jsonl"
    assert draflow(fresh, "export", "-o", str(second)).returncode == 0
    again = _events(second)
    strip = [{k: v for k, v in e.items() if k != "time"} for e in exported]
    assert [{k: v for k, v in e.items() if k != "time"} for e in again] == strip, "same ids, subjects, order"

    # the imported log is a working log: the next append sees the right aggregate versions
    store = await EventStore.open(fresh, "test")
    try:
        assert await store.last_seq(store.subject("Pod", "default", "web.1")) == 5
        env = await store.last(store.subject("Saga", None, "sched-web-1"))
        assert env is not None and isinstance(env.data, SagaCompleted)
    finally:
        await store.close()

    # a second import into the now non-empty system: nothing to do; a foreign log is refused
    r = draflow(fresh, "import", str(first))
    assert r.returncode == 0 and "imported 0 events (6 were already there)" in r.stdout, r
    other = tmp_path / "other.jsonl"
    lines = first.read_text().splitlines()
    changed = json.loads(lines[1])
    changed["headers"]["Nats-Msg-Id"] = "someone-else"
    other.write_text("\n".join([lines[0], json.dumps(changed), *lines[2:]]) + "\n")
    r = draflow(fresh, "import", str(other))
    assert r.returncode == 1 and "is not empty (6 events)" in r.stderr, r
    assert "Traceback" not in r.stderr


async def test_partial_import_resumes_and_ranges_renumber(
    event_store: EventStore, settings: Settings, own_nats_server: LocalNatsServer, tmp_path: Path
) -> None:
    await _seed(event_store)
    full = tmp_path / "full.jsonl"
    assert draflow(settings, "export", "-o", str(full)).returncode == 0
    lines = full.read_text().splitlines()
    partial = tmp_path / "partial.jsonl"
    partial.write_text("\n".join(lines[:3]) + "\n")  # header + 2 events: an interrupted import

    fresh = _with_root(settings, own_nats_server)
    assert draflow(fresh, "import", str(partial)).returncode == 0
    r = draflow(fresh, "import", str(full))
    assert r.returncode == 0, r.stderr
    assert "imported 4 events (2 were already there)" in r.stdout
    assert "resuming" in r.stderr
    again = tmp_path / "again.jsonl"
    assert draflow(fresh, "export", "-o", str(again)).returncode == 0
    assert [e.get("envelope") for e in _events(again)] == [e.get("envelope") for e in _events(full)]

    # a range: sequences 3..4 of the source become 1..2 in an empty target (documented)
    r = draflow(settings, "export", "--from-seq", "3", "--to-seq", "4")
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["seq"] for x in r.stdout.splitlines()[1:]] == [3, 4]


def test_bad_input_is_one_line(settings: Settings, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"draflow_export": 1, "stream": "S", "root": "r", "from_seq": 1, "to_seq": 1}\nnope\n')
    r = draflow(settings, "import", str(bad))
    assert r.returncode == 1 and r.stderr.startswith(f"error: {bad}:2: not an exported message"), r.stderr
    r = draflow(settings, "export", "--from-seq", "0")
    assert r.returncode == 1 and r.stderr.strip() == "error: --from-seq: must be >= 1, got 0"
