"""``draflow log`` as a user runs it: a real process against a real stream."""

from __future__ import annotations

import json

from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.natsd import free_port
from tests.processes import draflow
from tests.widgets import WidgetCreated, WidgetResized


async def test_log_prints_one_line_per_event(event_store: EventStore, settings: Settings) -> None:
    a = event_store.subject("Widget", "default", "gpu.example.com")
    b = event_store.subject("Gizmo", None, "g")
    (s1,) = await event_store.append(a, WidgetCreated(name="a"), expected_last_seq=0, correlation_id="req-7")
    await event_store.append(b, WidgetCreated(name="b"), expected_last_seq=0)
    await event_store.append(a, WidgetResized(size=3), expected_last_seq=s1, correlation_id="req-8")
    await event_store.js.publish(b, b"not an envelope")

    out = draflow(settings, "log")
    assert out.returncode == 0, out.stderr
    header, *lines = out.stdout.splitlines()
    assert header.split() == ["SEQ", "TIME", "SUBJECT", "TYPE", "ACTOR", "CORRELATION"]
    assert [line.split()[0] for line in lines] == ["1", "2", "3", "4"]
    seq, time, subject, type_, actor, corr = lines[0].split()
    assert (seq, subject, type_, actor, corr) == ("1", a, "WidgetCreated", "test", "req-7")
    assert time.endswith("Z") and len(time) == len("2025-01-01T00:00:00.000Z")
    assert lines[1].split()[-1] == "-"  # no correlation
    assert "<undecodable>" in lines[3]

    relative = draflow(settings, "log", "--subject", "Widget.*.*", "--no-headers")
    assert [line.split()[0] for line in relative.stdout.splitlines()] == ["1", "3"]
    full = draflow(settings, "log", "--subject", b, "--from-seq", "3", "--no-headers")
    assert [line.split()[0] for line in full.stdout.splitlines()] == ["4"]

    as_json = draflow(settings, "log", "-o", "json", "--from-seq", "2")
    docs = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [d["seq"] for d in docs] == [2, 3, 4]
    assert docs[1]["type"] == "WidgetResized" and docs[1]["data"] == {"type": "WidgetResized", "size": 3}
    assert docs[1]["correlation_id"] == "req-8" and docs[1]["subject"] == a
    assert "error" in docs[2] and docs[2]["subject"] == b


def test_log_errors_are_one_line(settings: Settings) -> None:
    missing = draflow(settings, "log")  # the fixture's server runs, but no stream was created
    assert missing.returncode == 1
    assert (
        missing.stderr.strip()
        == f"error: no event log yet: stream {settings.stream} does not exist (start a service first)"
    )
    down = draflow(settings, "log", "--nats-url", f"nats://127.0.0.1:{free_port()}")
    assert down.returncode == 1 and down.stderr.startswith("error: cannot connect to NATS")
    assert len(down.stderr.strip().splitlines()) == 1
    bad = draflow(settings, "log", "--from-seq", "0")
    assert bad.returncode == 1 and "must be >= 1" in bad.stderr
