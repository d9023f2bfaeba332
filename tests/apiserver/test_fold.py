"""The pure parts: the object fold and its reducer registry, the index, the strategy, selectors."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from msgspec.structs import replace

from events.api import core_v1 as c1
from events.api import resource_v1 as r1
from events.api.codec import decode_object, object_meta
from events.envelope import Event
from events.objects import (
    deletion_requested,
    finalizers_changed,
    kind_and_verb,
    object_applied,
    object_deleted,
    object_event_type,
    status_type,
    status_updated,
)
from events.union import register_events
from projections.objects import ObjectIndex, fold, object_projection, reducer
from services.apiserver.strategy import (
    FinalizerForbidden,
    deletion_events,
    finalize_events,
    generated_name,
    merge_update,
    prepare_create,
)
from services.runtime.selectors import SelectorError, parse_field_selector, parse_label_selector


def claim(name: str = "c", **meta: Any) -> r1.ResourceClaim:
    obj = decode_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", **meta},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        }
    )
    assert isinstance(obj, r1.ResourceClaim)
    return obj


class ClaimLabelled(Event, frozen=True, kw_only=True):
    """A domain event a controller might append on a claim's subject (test-only)."""

    key: str
    value: str


register_events(ClaimLabelled)


@reducer(ClaimLabelled)
def _labelled(state: r1.ResourceClaim | None, ev: ClaimLabelled) -> r1.ResourceClaim | None:
    if state is None:
        return None
    labels = {**state.metadata.labels, ev.key: ev.value}
    return replace(state, metadata=replace(state.metadata, labels=labels))


def test_generated_event_types_name_the_kind() -> None:
    cls = object_event_type("ResourceClaim", "Applied")
    assert cls.type_name() == "ResourceClaimApplied"
    assert kind_and_verb("DeviceClassDeleted") == ("DeviceClass", "Deleted")
    assert kind_and_verb("ClaimLabelled") is None
    assert status_type("DeviceClass") is None  # no status, so no DeviceClassStatusUpdated
    with pytest.raises(KeyError):
        object_event_type("DeviceClass", "StatusUpdated")
    ev = object_applied(claim())
    assert msgspec.json.decode(msgspec.json.encode(ev), type=cls) == ev


def test_fold_stamps_resource_version_and_keeps_status_on_reapply() -> None:
    c = claim()
    state = fold(None, "ResourceClaimApplied", object_applied(c), 5)
    assert state.metadata.resource_version == "5"
    status = msgspec.convert(
        {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}, r1.ResourceClaimStatus
    )
    state = fold(state, "ResourceClaimStatusUpdated", status_updated("ResourceClaim", status), 6)
    relabelled = replace(c, metadata=replace(c.metadata, labels={"a": "b"}))
    state = fold(state, "ResourceClaimApplied", object_applied(relabelled), 9)
    assert state.status == status and state.metadata.labels == {"a": "b"}
    assert state.metadata.resource_version == "9"
    # an event type nobody reduces still moves the version (it is the subject's last sequence)
    assert fold(state, "SomethingElse", None, 12).metadata.resource_version == "12"


def test_registered_domain_reducer_extends_the_fold() -> None:
    state = fold(None, "ResourceClaimApplied", object_applied(claim()), 1)
    state = fold(state, "ClaimLabelled", ClaimLabelled(key="k", value="v"), 2)
    assert state.metadata.labels == {"k": "v"}
    with pytest.raises(TypeError, match="already has a reducer"):
        reducer(ClaimLabelled)(lambda s, e: s)


def test_index_tracks_versions_tombstones_and_duplicates() -> None:
    idx = ObjectIndex()
    add = idx.apply("ResourceClaim", "default", "c", "ResourceClaimApplied", object_applied(claim()), 3)
    assert add is not None and add.type == "ADDED"
    assert (
        idx.apply("ResourceClaim", "default", "c", "ResourceClaimApplied", object_applied(claim()), 3) is None
    )
    assert idx.count_in_namespace("default") == 1
    ev = finalizers_changed("ResourceClaim", ("x/y",))
    mod = idx.apply("ResourceClaim", "default", "c", "ResourceClaimFinalizersChanged", ev, 4)
    assert mod is not None and mod.type == "MODIFIED" and object_meta(mod.object).finalizers == ("x/y",)
    gone = idx.apply(
        "ResourceClaim", "default", "c", "ResourceClaimDeleted", object_deleted("ResourceClaim"), 7
    )
    assert gone is not None and gone.type == "DELETED"
    assert idx.get("ResourceClaim", "default", "c") is None
    assert idx.version("ResourceClaim", "default", "c") == 7  # tombstone: a re-create expects 7
    assert idx.count_in_namespace("default") == 0
    assert (
        idx.touch("ResourceClaim", "default", "c", 9) is None
        and idx.version("ResourceClaim", "default", "c") == 9
    )


def test_object_projection_folds_one_kind_by_subject() -> None:
    from events.codec import make_envelope
    from projections.base import MemoryView

    view = MemoryView(object_projection("ResourceClaim"), root="t")
    subject = "t.ev.ResourceClaim.default.c"
    envs = [
        make_envelope(object_applied(claim()), id="1", subject=subject),
        make_envelope(ClaimLabelled(key="a", value="b"), id="2", subject=subject),
        make_envelope(object_applied(claim("other")), id="3", subject="t.ev.DeviceClass._.x"),
    ]
    for seq, env in enumerate(envs, start=1):
        msgspec.structs.force_setattr(env, "seq", seq)
    view.apply(envs)
    assert list(view.rows) == [subject]
    assert (
        view.rows[subject].metadata.labels == {"a": "b"}
        and view.rows[subject].metadata.resource_version == "2"
    )


def test_namespace_deletion_requested_marks_it_terminating() -> None:
    ns = decode_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}})
    state = fold(None, "NamespaceApplied", object_applied(ns), 1)
    state = fold(
        state, "NamespaceDeletionRequested", deletion_requested("Namespace", "2026-01-01T00:00:00Z"), 2
    )
    assert state.status.phase == "Terminating" and state.metadata.deletion_timestamp == "2026-01-01T00:00:00Z"


def test_prepare_create_drops_server_fields_and_controller_status() -> None:
    dumped = claim(uid="u", resourceVersion="530", creationTimestamp="2024-01-01T00:00:00Z", generation=4)
    dumped = replace(dumped, status=msgspec.convert({"reservedFor": [{"name": "p"}]}, r1.ResourceClaimStatus))
    clean = prepare_create(dumped)
    assert (
        clean.metadata.uid == "" and clean.metadata.resource_version == "" and clean.metadata.generation == 0
    )
    assert clean.status == r1.ResourceClaimStatus()
    node = decode_object(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "status": {"capacity": {"cpu": "4"}}}
    )
    assert isinstance(node, c1.Node) and prepare_create(node).status.capacity == {"cpu": "4"}


def test_merge_update_keeps_identity_status_and_controller_finalizers() -> None:
    old = replace(
        claim(),
        metadata=replace(
            claim().metadata, uid="u1", generation=2, resource_version="10", finalizers=("ctrl/protect",)
        ),
    )
    same = merge_update(old, claim())
    assert same == old  # nothing changed: an apply of the same manifest is "unchanged"
    labelled = merge_update(old, claim(labels={"a": "b"}))
    assert labelled.metadata.generation == 2 and labelled.metadata.finalizers == ("ctrl/protect",)
    new_spec = replace(claim(), spec=r1.ResourceClaimSpec())
    assert merge_update(old, new_spec).metadata.generation == 3


def test_deletion_waits_for_finalizers_and_running_pods() -> None:
    assert [type(e).type_name() for e in deletion_events(claim(), "t")] == ["ResourceClaimDeleted"]
    held = claim(finalizers=["x/y"])
    (ev,) = deletion_events(held, "t")
    assert type(ev).type_name() == "ResourceClaimDeletionRequested"
    deleting = replace(
        held, metadata=replace(held.metadata, deletion_timestamp="t", deletion_grace_period_seconds=0)
    )
    assert deletion_events(deleting, "t2") == []
    pod = decode_object(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"nodeName": "n1", "containers": []},
        }
    )
    (graceful,) = deletion_events(pod, "t")
    assert type(graceful).type_name() == "PodDeletionRequested" and graceful.grace_period_seconds == 30  # type: ignore[attr-defined]
    assert [type(e).type_name() for e in deletion_events(pod, "t", 0)] == ["PodDeleted"]


def test_finalize_removes_the_object_with_its_last_finalizer() -> None:
    held = claim(finalizers=["a/b", "c/d"])
    assert [type(e).type_name() for e in finalize_events(held, [], ["a/b"])] == [
        "ResourceClaimFinalizersChanged"
    ]
    assert finalize_events(held, ["a/b"], []) == []
    deleting = replace(
        held, metadata=replace(held.metadata, deletion_timestamp="t", deletion_grace_period_seconds=0)
    )
    names = [type(e).type_name() for e in finalize_events(deleting, [], ["a/b", "c/d"])]
    assert names == ["ResourceClaimFinalizersChanged", "ResourceClaimDeleted"]
    with pytest.raises(FinalizerForbidden):
        finalize_events(deleting, ["e/f"], [])


def test_generated_names_fit_and_use_the_kubernetes_alphabet() -> None:
    name = generated_name("x" * 80)
    assert len(name) == 63 and set(name[-5:]) <= set("bcdfghjklmnpqrstvwxz2456789")


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("", {}, True),
        ("app=web", {"app": "web"}, True),
        ("app==web,tier!=db", {"app": "web", "tier": "db"}, False),
        ("env in (a, b)", {"env": "b"}, True),
        ("env notin (a,b)", {}, True),
        ("!legacy,app", {"app": "x"}, True),
        ("!legacy", {"legacy": ""}, False),
        ("rank>3", {"rank": "10"}, True),
        ("rank<3", {"rank": "x"}, False),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(selector)(labels) is expected


@pytest.mark.parametrize("bad", ["a=b=c", "in (x)", "a in ()", "=x", "a b"])
def test_bad_label_selectors_are_refused(bad: str) -> None:
    with pytest.raises(SelectorError, match="couldn't parse the selector string"):
        parse_label_selector(bad)


def test_field_selectors() -> None:
    _, match = parse_field_selector("metadata.name=x,spec.nodeName!=n1")
    assert match({"metadata": {"name": "x"}, "spec": {"nodeName": "n2"}})
    assert not match({"metadata": {"name": "x"}, "spec": {"nodeName": "n1"}})
    with pytest.raises(SelectorError):
        parse_field_selector("metadata.name")
