"""The garbage collector's decisions, pure: owners matched by uid, background / foreground / orphan."""

from __future__ import annotations

from draflow.events.api.meta import OwnerReference
from draflow.services.garbage_collector import (
    DeleteObject,
    Graph,
    Item,
    RemoveFinalizer,
    RemoveOwnerReferences,
    decide,
)


def node(name: str, uid: str, *, deleting: bool = False, finalizers: tuple[str, ...] = ()) -> Item:
    return Item(
        kind="Node",
        wire_kind="Node",
        group="",
        namespaced=False,
        namespace="",
        name=name,
        uid=uid,
        deleting=deleting,
        finalizers=finalizers,
    )


def ref(
    kind: str, name: str, uid: str, api_version: str = "v1", *, block: bool | None = None
) -> OwnerReference:
    return OwnerReference(api_version=api_version, kind=kind, name=name, uid=uid, block_owner_deletion=block)


def slice_of(name: str, *owners: OwnerReference, deleting: bool = False) -> Item:
    return Item(
        kind="ResourceSlice",
        wire_kind="ResourceSlice",
        group="resource.k8s.io",
        namespaced=False,
        namespace="",
        name=name,
        uid=f"uid-{name}",
        owners=owners,
        deleting=deleting,
    )


def pod(name: str, uid: str, namespace: str = "default", *owners: OwnerReference, **kw: object) -> Item:
    return Item(
        kind="Pod",
        wire_kind="Pod",
        group="",
        namespaced=True,
        namespace=namespace,
        name=name,
        uid=uid,
        owners=owners,
        **kw,  # type: ignore[arg-type]
    )


def claim(name: str, namespace: str, *owners: OwnerReference) -> Item:
    return Item(
        kind="ResourceClaim",
        wire_kind="ResourceClaim",
        group="resource.k8s.io",
        namespaced=True,
        namespace=namespace,
        name=name,
        uid=f"uid-{name}",
        owners=owners,
    )


def graph(*items: Item) -> Graph:
    g = Graph()
    for item in items:
        g.put(item)
    return g


def test_a_dependent_of_an_existing_owner_stays() -> None:
    g = graph(node("gh200-1", "n1"), slice_of("s", ref("Node", "gh200-1", "n1")))
    assert decide(g, "uid-s") == []
    assert decide(g, "n1") == []


def test_a_dependent_whose_owner_is_gone_is_deleted_in_the_background() -> None:
    g = graph(node("gh200-1", "n1"), slice_of("s", ref("Node", "gh200-1", "n1")))
    dirty = g.remove("n1")
    assert "uid-s" in dirty
    (action,) = decide(g, "uid-s")
    assert isinstance(action, DeleteObject)
    assert (action.kind, action.name, action.uid, action.policy) == (
        "ResourceSlice",
        "s",
        "uid-s",
        "Background",
    )


def test_an_owner_recreated_under_its_name_does_not_keep_old_dependents() -> None:
    g = graph(node("gh200-1", "new-uid"), slice_of("s", ref("Node", "gh200-1", "old-uid")))
    (action,) = decide(g, "uid-s")
    assert isinstance(action, DeleteObject)
    # the same uid under another kind or name is not the owner either
    g = graph(node("other", "n1"), slice_of("s", ref("Node", "gh200-1", "n1")))
    assert isinstance(decide(g, "uid-s")[0], DeleteObject)


def test_namespaced_owners_must_live_in_the_dependents_namespace() -> None:
    owner = pod("p", "pod-uid", "team-a")
    here = claim("c", "team-a", ref("Pod", "p", "pod-uid"))
    there = claim("d", "team-b", ref("Pod", "p", "pod-uid"))
    g = graph(owner, here, there)
    assert decide(g, "uid-c") == []
    assert isinstance(decide(g, "uid-d")[0], DeleteObject)
    # a namespaced dependent may have a cluster-scoped owner
    g = graph(node("n", "n1"), claim("e", "team-a", ref("Node", "n", "n1")))
    assert decide(g, "uid-e") == []


def test_a_solid_owner_keeps_the_object_and_the_dangling_reference_goes() -> None:
    g = graph(
        node("a", "a1"),
        slice_of("s", ref("Node", "a", "a1"), ref("Node", "b", "b1")),
    )
    (action,) = decide(g, "uid-s")
    assert isinstance(action, RemoveOwnerReferences) and action.owner_uids == ("b1",)


def test_an_owner_of_a_kind_draflow_does_not_serve_cannot_be_resolved() -> None:
    g = graph(pod("web-1", "p1", "default", ref("ReplicaSet", "web", "rs1", "apps/v1")))
    assert decide(g, "p1") == []


def test_orphan_removes_the_references_then_the_finalizer() -> None:
    owner = node("n", "n1", deleting=True, finalizers=("orphan",))
    g = graph(owner, slice_of("s", ref("Node", "n", "n1")), slice_of("t", ref("Node", "n", "n1")))
    actions = decide(g, "n1")
    assert [type(a) for a in actions] == [RemoveOwnerReferences, RemoveOwnerReferences, RemoveFinalizer]
    assert [a.name for a in actions] == ["s", "t", "n"]
    assert actions[-1].finalizer == "orphan"  # type: ignore[union-attr]


def test_foreground_waits_for_blocking_dependents() -> None:
    owner = node("n", "n1", deleting=True, finalizers=("foregroundDeletion",))
    blocking = slice_of("s", ref("Node", "n", "n1", block=True))
    g = graph(owner, blocking)
    assert decide(g, "n1") == []  # the owner waits ...
    (action,) = decide(g, "uid-s")  # ... while its dependent is deleted
    assert isinstance(action, DeleteObject) and action.policy == "Background"
    g.put(slice_of("s", ref("Node", "n", "n1", block=True), deleting=True))
    assert decide(g, "n1") == []  # being deleted is not gone
    assert "n1" in g.remove("uid-s")
    (action,) = decide(g, "n1")
    assert isinstance(action, RemoveFinalizer) and action.finalizer == "foregroundDeletion"
    # a dependent that does not block its owner is deleted but not waited for
    g = graph(owner, slice_of("s", ref("Node", "n", "n1")))
    assert isinstance(decide(g, "n1")[0], RemoveFinalizer)


def test_a_dependent_with_dependents_of_its_own_goes_in_the_foreground_too() -> None:
    owner = node("n", "n1", deleting=True, finalizers=("foregroundDeletion",))
    middle = pod("p", "p1", "default", ref("Node", "n", "n1", block=True))
    leaf = claim("c", "default", ref("Pod", "p", "p1", block=True))
    (action,) = decide(graph(owner, middle, leaf), "p1")
    assert isinstance(action, DeleteObject) and action.policy == "Foreground"


def test_a_reference_to_the_waiting_owner_is_dropped_when_another_owner_is_solid() -> None:
    going = node("n", "n1", deleting=True, finalizers=("foregroundDeletion",))
    g = graph(going, node("m", "m1"), slice_of("s", ref("Node", "n", "n1"), ref("Node", "m", "m1")))
    (action,) = decide(g, "uid-s")
    assert isinstance(action, RemoveOwnerReferences) and action.owner_uids == ("n1",)


def test_objects_being_deleted_without_gc_finalizers_are_left_alone() -> None:
    g = graph(slice_of("s", ref("Node", "gone", "x"), deleting=True))
    assert decide(g, "uid-s") == []
