"""Golden logs (``tests/data/golden/*.jsonl``, written by ``draflow export``) decode with today's code.

Every line of every golden log is decoded on every run: changing an event's shape without bumping
its ``SCHEMA`` and adding an upcaster breaks this test. ``basic-claim-template.jsonl`` is a real
run (``python -m tests.debugging.make_golden``: object applies, PodScheduling sagas, allocation,
reservation, preparation, an unschedulable pod, teardown). ``old-schema.jsonl`` is hand-written: a
schema-1 event of ``GoldenGadgetCalibrated`` (defined here at schema 2), read through its upcaster.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, ClassVar

import events.dra
from events.codec import decode, encode
from events.envelope import Event
from events.union import register_events
from events.upcasters import upcaster
from infra.config import Settings
from infra.eventstore import EventStore
from projections.objects import fold
from sagas.state import SagaState, SagaStatus
from sagas.state import apply as saga_apply
from services.cli.export import import_log, read_export

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


class GoldenGadgetCalibrated(Event, frozen=True, kw_only=True):
    SCHEMA: ClassVar[int] = 2
    gadget: str
    offset_milli: int


register_events(GoldenGadgetCalibrated)


@upcaster("GoldenGadgetCalibrated", from_version=1)
def _gadget_v1_to_v2(data: dict) -> dict:
    data["offset_milli"] = round(data.pop("offset") * 1000)
    return data


def golden_files() -> list[Path]:
    files = sorted(GOLDEN.glob("*.jsonl"))
    assert {f.name for f in files} >= {"basic-claim-template.jsonl", "old-schema.jsonl"}
    return files


def test_every_golden_event_decodes_with_current_code() -> None:
    seen: set[str] = set()
    for path in golden_files():
        header, msgs = read_export(path)
        assert header.count == len(msgs), path
        for m in msgs:
            where = f"{path.name} seq {m.seq}"
            env = decode(m.payload(), m.seq)
            cls = type(env.data)
            assert env.type == cls.type_name() == m.headers["Draflow-Type"], where
            assert env.schema == cls.SCHEMA, f"{where}: not brought to the current schema"
            assert env.subject == m.subject and env.id == m.headers["Nats-Msg-Id"], where
            assert decode(encode(env)) == env, f"{where}: does not survive re-encoding"
            seen.add(env.type)
    # the real run covers the main flows; keep it that way when regenerating
    assert seen >= {
        "NamespaceApplied", "DeviceClassApplied", "ResourceSliceApplied", "ResourceClaimTemplateApplied",
        "PodApplied", "ResourceClaimApplied", "SagaStarted", "SagaStepCompleted", "SagaCompleted",
        "ClaimAllocated", "ClaimReserved", "PodBound", "PodResourcesPrepared", "PodStarted",
        "PodUnschedulable", "ClaimDeallocated", "PodDeleted", "KubeEventRecorded",
        "GoldenGadgetCalibrated",
    }, seen


def test_old_schema_event_is_upcast() -> None:
    _, (msg,) = read_export(GOLDEN / "old-schema.jsonl")
    env = decode(msg.payload(), msg.seq)
    assert env.data == GoldenGadgetCalibrated(gadget="g1", offset_milli=250)
    assert env.schema == 2 and env.actor == "hand-written"


async def test_golden_log_imports_and_replays(event_store: EventStore, settings: Settings) -> None:
    """A bug-report log imports under another subject root and replays in the same order."""
    path = GOLDEN / "basic-claim-template.jsonl"
    header, msgs = read_export(path)
    skipped, appended = await import_log(settings, path, io.StringIO())
    assert (skipped, appended) == (0, len(msgs))
    replayed = await event_store.events(event_store.all_events)
    assert [e.seq for e in replayed] == [m.seq for m in msgs]
    assert [e.id for e in replayed] == [m.headers["Nats-Msg-Id"] for m in msgs]
    assert [e.subject for e in replayed] == [settings.root + m.subject[len(header.root) :] for m in msgs]
    assert [type(e.data).__name__ for e in replayed] == [decode(m.payload()).type for m in msgs]


def test_golden_run_replays_through_current_reducers() -> None:
    """Replaying the real run with today's reducers gives what happened: both pods ran, both
    scheduling sagas completed, and the teardown left nothing of the namespace."""
    _, msgs = read_export(GOLDEN / "basic-claim-template.jsonl")
    envs = [decode(m.payload(), m.seq) for m in msgs]
    objects: dict[str, Any] = {}
    sagas: dict[str, SagaState | None] = {}
    running_at: dict[str, str] = {}
    for env in envs:
        if env.subject.startswith("draflow.ev.Saga."):
            sagas[env.subject] = saga_apply(sagas.get(env.subject), env)
            continue
        objects[env.subject] = fold(objects.get(env.subject), env.type, env.data, env.seq)
        if isinstance(env.data, events.dra.PodStarted):
            pod = objects[env.subject]
            running_at[pod.metadata.name] = f"{pod.status.phase} on {pod.spec.node_name}"
    assert running_at == {"pod0": "Running on node-1", "pod1": "Running on node-1"}
    assert len(sagas) == 2
    assert all(s is not None and s.status == SagaStatus.COMPLETED for s in sagas.values()), sagas
    ns = ".basic-resourceclaimtemplate."
    # (core/v1 Events of the namespace outlive it in this run; they are not API objects it owned)
    kube_events = "draflow.ev.Event."
    left = {s for s, o in objects.items() if ns in s and o is not None and not s.startswith(kube_events)}
    assert left == set()
    assert objects["draflow.ev.DeviceClass._.gpu~example~com"] is not None
