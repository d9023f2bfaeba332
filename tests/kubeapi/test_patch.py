"""PATCH bodies applied to an object's JSON (pure): JSON patch, merge patch, strategic merge patch
with the built-in kinds' merge keys and kubectl's directives."""

from __future__ import annotations

import json
from typing import Any

import pytest

from events.api import core_v1 as c1
from events.api import resource_v1 as r1
from services.apiserver.kubeapi.patch import PatchError, apply_patch, json_patch, merge_patch, strategic_merge

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
    "spec": {
        "containers": [
            {
                "name": "one",
                "image": "i:1",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            },
            {"name": "two", "image": "i:2", "ports": [{"containerPort": 80}]},
        ],
        "tolerations": [{"key": "k", "operator": "Exists"}],
    },
}


def test_json_patch_operations() -> None:
    ops = [
        {"op": "add", "path": "/metadata/labels/c", "value": "3"},
        {"op": "remove", "path": "/metadata/labels/a"},
        {"op": "replace", "path": "/spec/containers/0/image", "value": "i:9"},
        {"op": "copy", "from": "/spec/containers/1/image", "path": "/metadata/labels/copied"},
        {"op": "move", "from": "/metadata/labels/b", "path": "/metadata/labels/moved"},
        {"op": "add", "path": "/spec/tolerations/-", "value": {"key": "z"}},
        {"op": "add", "path": "/metadata/finalizers/0", "value": "first"},
        {"op": "test", "path": "/metadata/labels/c", "value": "3"},
        {"op": "add", "path": "/metadata/annotations", "value": {"a~b/c": "d"}},
        {"op": "remove", "path": "/metadata/annotations/a~0b~1c"},
    ]
    out = json_patch(POD, ops)
    assert out["metadata"]["labels"] == {"c": "3", "copied": "i:2", "moved": "2"}
    assert out["spec"]["containers"][0]["image"] == "i:9"
    assert out["spec"]["tolerations"][-1] == {"key": "z"}
    assert out["metadata"]["finalizers"] == ["first", "x"]
    assert out["metadata"]["annotations"] == {}
    assert POD["metadata"]["labels"] == {"a": "1", "b": "2"}  # the input is not changed
    for bad, code in (
        ({"op": "test", "path": "/metadata/labels/a", "value": "no"}, 422),
        ({"op": "remove", "path": "/metadata/nope"}, 422),
        ({"op": "replace", "path": "/spec/containers/7/image", "value": "x"}, 422),
        ({"op": "add", "path": "no-slash", "value": 1}, 422),
        ({"op": "frobnicate", "path": "/x"}, 400),
        ({"op": "move", "path": "/x"}, 400),
        ({"path": 3}, 400),
        ({"op": "remove", "path": ""}, 422),
    ):
        with pytest.raises(PatchError) as exc:
            json_patch(POD, [bad])
        assert exc.value.code == code, bad
    with pytest.raises(PatchError):
        json_patch(POD, {"op": "add"})
    assert json_patch(POD, [{"op": "add", "path": "", "value": {"kind": "X"}}]) == {"kind": "X"}


def test_merge_patch() -> None:
    out = merge_patch(
        POD, {"metadata": {"labels": {"a": None, "c": "3"}, "finalizers": None}, "spec": {"tolerations": []}}
    )
    assert out["metadata"] == {"name": "p", "labels": {"b": "2", "c": "3"}}
    assert out["spec"]["tolerations"] == [] and len(out["spec"]["containers"]) == 2


def test_strategic_merge_keys_and_directives() -> None:
    patch = {
        "metadata": {"finalizers": ["y", "x"], "labels": {"a": None}},
        "spec": {
            "$setElementOrder/containers": [{"name": "two"}, {"name": "one"}],
            "containers": [
                {"name": "one", "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}]},
                {"name": "three", "image": "i:3", "$patch": "merge"},
                {"name": "two", "$patch": "delete"},
            ],
            "tolerations": [{"key": "only"}],  # no merge key upstream: replaced
        },
    }
    out = strategic_merge(POD, patch, c1.Pod)
    assert out["metadata"]["finalizers"] == ["x", "y"] and out["metadata"]["labels"] == {"b": "2"}
    names = [c["name"] for c in out["spec"]["containers"]]
    assert names == ["one", "three"]
    one = out["spec"]["containers"][0]
    assert one["image"] == "i:1" and one["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "20"},
        {"name": "C", "value": "3"},
    ]
    assert out["spec"]["containers"][1] == {"name": "three", "image": "i:3"}
    assert out["spec"]["tolerations"] == [{"key": "only"}]
    replaced = strategic_merge(
        POD, {"spec": {"containers": [{"$patch": "replace"}, {"name": "solo", "image": "s"}]}}, c1.Pod
    )
    assert replaced["spec"]["containers"] == [{"name": "solo", "image": "s"}]
    retained = strategic_merge(POD, {"metadata": {"$retainKeys": ["name"], "name": "p"}}, c1.Pod)
    assert retained["metadata"] == {"name": "p"}
    dropped = strategic_merge(POD, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}, c1.Pod)
    assert dropped["metadata"]["finalizers"] == []
    gone = strategic_merge(POD, {"spec": {"$patch": "delete"}}, c1.Pod)
    assert "spec" not in gone
    whole = strategic_merge(POD, {"metadata": {"$patch": "replace", "name": "q"}}, c1.Pod)
    assert whole["metadata"] == {"name": "q"}
    reorder = strategic_merge(
        POD, {"spec": {"$setElementOrder/containers": [{"name": "two"}, {"name": "one"}]}}, c1.Pod
    )
    assert [c["name"] for c in reorder["spec"]["containers"]] == ["two", "one"]


def test_strategic_merge_on_a_claims_reserved_for() -> None:
    claim = {"status": {"reservedFor": [{"resource": "pods", "name": "a", "uid": "1"}]}}
    out = strategic_merge(
        claim, {"status": {"reservedFor": [{"resource": "pods", "name": "b", "uid": "2"}]}}, r1.ResourceClaim
    )
    assert [r["uid"] for r in out["status"]["reservedFor"]] == ["1", "2"]


def test_apply_patch_content_types() -> None:
    body = json.dumps({"metadata": {"labels": {"z": "9"}}}).encode()
    for ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        assert apply_patch(POD, body, ctype, c1.Pod)["metadata"]["labels"]["z"] == "9"
    ops = json.dumps([{"op": "add", "path": "/metadata/labels/z", "value": "9"}]).encode()
    assert apply_patch(POD, ops, "application/json-patch+json", c1.Pod)["metadata"]["labels"]["z"] == "9"
    for raw, ctype, code in (
        (body, "text/plain", 415),
        (b"{", "application/merge-patch+json", 400),
        (b"[]", "application/merge-patch+json", 400),
        (b"[]", "application/strategic-merge-patch+json", 400),
        (b'[{"op":"add","path":"","value":3}]', "application/json-patch+json", 422),
    ):
        with pytest.raises(PatchError) as exc:
            apply_patch(POD, raw, ctype, c1.Pod)
        assert exc.value.code == code, (raw, ctype)
    with pytest.raises(PatchError) as exc:
        apply_patch(None, body, "application/merge-patch+json", c1.Pod)
    assert exc.value.code == 404
