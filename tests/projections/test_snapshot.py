"""The object fold's snapshot codec: snapshot + tail folds to exactly what the whole log folds to."""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec
import pytest

from draflow.events.api.apiextensions_v1 import CustomObject
from draflow.events.api.meta import ObjectMeta
from draflow.events.codec import decode
from draflow.events.subjects import parse_subject
from draflow.projections.objects import ObjectIndex
from draflow.projections.snapshot import SnapshotDecodeError, decode_index, encode_index, schema, stored_kinds
from draflow.services.quota_reconciler.reconcile import TRACKED
from draflow.services.scheduler.service.snapshot import KINDS as SCHEDULER_KINDS
from tests.paths import GOLDEN

Record = tuple[int, str, str, str, Any]  # seq, kind, namespace, name, envelope


def _recorded(name: str) -> list[Record]:
    lines = (GOLDEN / name).read_text().splitlines()
    root = json.loads(lines[0])["root"]
    out: list[Record] = []
    for line in lines[1:]:
        rec = json.loads(line)
        kind, ns, obj = parse_subject(rec["subject"], root)
        env = decode(msgspec.json.encode(rec["envelope"]), rec["seq"])
        out.append((rec["seq"], kind, ns or "", obj, env))
    return out


def _fold(index: ObjectIndex, records: list[Record], kinds: frozenset[str] | None = None) -> ObjectIndex:
    """What the apiserver's store folds (sagas and other aggregates are not objects), or a subset."""
    for _, kind, ns, name, env in records:
        if kind in (kinds or stored_kinds()):
            index.apply_envelope(kind, ns, name, env)
    return index


def _state(index: ObjectIndex) -> Any:
    objects, versions = index.image()
    counts = {ns: index.count_in_namespace(ns) for _, ns, _ in versions}
    return objects, versions, counts


LOG = _recorded("basic-claim-template.jsonl")


@pytest.mark.parametrize(
    "kinds", [None, SCHEDULER_KINDS, frozenset(TRACKED)], ids=["all", "scheduler", "quota"]
)
def test_snapshot_plus_tail_is_the_full_fold_at_every_cut(kinds: frozenset[str] | None) -> None:
    """Every cut point of a recorded log (the apiserver's and controllers' fold, and the subsets
    the scheduler and the quota reconciler keep, decoded from the one snapshot of everything)."""
    full = _state(_fold(ObjectIndex(), LOG, kinds))
    for cut in range(len(LOG) + 1):
        head = _fold(ObjectIndex(), LOG[:cut])
        body = encode_index(*head.image())
        restored = decode_index(body, kinds)
        assert _state(_fold(restored, LOG[cut:], kinds)) == full, cut


def test_random_cuts_with_events_seen_twice() -> None:
    """A snapshot may hold events past its position (an append folded before the log delivered
    it): the tail then brings them again and the fold ignores them."""
    rng = random.Random(24)
    full = _state(_fold(ObjectIndex(), LOG))
    for _ in range(40):
        cut = rng.randrange(len(LOG))
        ahead = rng.randrange(cut, len(LOG) + 1)
        head = _fold(ObjectIndex(), LOG[:cut])
        extra = [r for r in LOG[cut:ahead] if rng.random() < 0.5]  # some later events folded early
        _fold(head, extra)
        restored = decode_index(encode_index(*head.image()))
        assert _state(_fold(restored, LOG[cut:])) == full, (cut, ahead)


def test_garbage_is_a_decode_error_and_the_schema_is_stable() -> None:
    with pytest.raises(SnapshotDecodeError):
        decode_index(b"\x93not a snapshot")
    with pytest.raises(SnapshotDecodeError):
        decode_index(encode_index(*_fold(ObjectIndex(), LOG[:20]).image())[:-7])
    assert schema() == schema() and schema().startswith("2-")


def test_custom_objects_are_held_as_custom_objects() -> None:
    """A fold with a CRD's objects (kinds the code does not know) is snapshotted too."""
    index = _fold(ObjectIndex(), LOG[:30])
    frob = CustomObject(
        api_version="gpu.resource.example.com/v1",
        kind="ClaimParameters",
        metadata=ObjectMeta(name="three", namespace="default", resource_version="31"),
        content={"spec": {"numberOfFrobnicators": 3, "env": {"A": "b"}}},
    )
    index.put("ClaimParameters", "default", "three", frob, 31)
    restored = decode_index(encode_index(*index.image()))
    assert _state(restored) == _state(index)
    assert restored.get("ClaimParameters", "default", "three") == frob
    assert decode_index(encode_index(*index.image()), frozenset({"Pod"})).get(
        "ClaimParameters", "default", "three"
    ) is None
