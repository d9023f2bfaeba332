"""The manifest loader: documents, lists, JSON, and one bad document never stops the others."""

from __future__ import annotations

from pathlib import Path

from draflow.events.api import core_v1 as c1
from draflow.events.api import resource_v1 as r1
from draflow.events.api.loader import load_manifests, substitute_index

NS = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"


def test_multi_document_with_preamble_and_empty_documents() -> None:
    text = (
        "# a comment-only preamble\n---\n"
        + NS.format(name="a")
        + "---\n---\n"
        + NS.format(name="b")
        + "---\n"
    )
    results = load_manifests(text)
    assert [r.obj.metadata.name for r in results if isinstance(r.obj, c1.Namespace)] == ["a", "b"]
    assert [r.document for r in results] == [0, 1]
    assert results[1].line == 9


def test_bad_document_does_not_stop_the_others() -> None:
    text = NS.format(name="a") + "---\nkind: [unclosed\n---\n" + NS.format(name="c")
    results = load_manifests(text, name="x.yaml")
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].error is not None
    assert "error parsing YAML: line 7: did not find expected ',' or ']'" in str(results[1].error)
    assert results[1].where == "x.yaml: document 2 (line 6)"


def test_kubectl_list_is_unwrapped() -> None:
    text = """
apiVersion: v1
kind: List
items:
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata: {name: one}
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata: {name: two}
  spec: {bogus: 1}
"""
    results = load_manifests(text)
    assert [(r.item, r.ok) for r in results] == [(0, True), (1, False)]
    assert 'unknown field "spec.bogus"' in str(results[1].error)


def test_json_and_flow_style_yaml() -> None:
    json_text = '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "j"}}'
    flow_text = "{apiVersion: v1, kind: Namespace, metadata: {name: f,},}  # trailing commas\n"
    for text, name in ((json_text, "j"), (flow_text, "f")):
        (result,) = load_manifests(text)
        assert isinstance(result.obj, c1.Namespace) and result.obj.metadata.name == name


def test_timestamps_stay_strings_and_nulls_mean_unset() -> None:
    text = """
apiVersion: v1
kind: Namespace
metadata:
  name: t
  creationTimestamp: 2024-05-01T10:00:00Z
  labels: null
"""
    (result,) = load_manifests(text)
    assert isinstance(result.obj, c1.Namespace)
    assert result.obj.metadata.creation_timestamp == "2024-05-01T10:00:00Z"
    assert result.obj.metadata.labels == {}


def test_duplicate_keys_are_refused() -> None:
    (result,) = load_manifests("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  name: b\n")
    assert 'mapping key "name" already defined at line 4' in str(result.error)


def test_invalid_utf8_is_a_clear_error() -> None:
    (result,) = load_manifests(b"apiVersion: v1\nkind: Namespace\nmetadata: {name: \xff}\n")
    assert "not valid UTF-8" in str(result.error)


def test_alias_bomb_is_bounded() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(
            f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
        )
    text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: b\n  annotations:\n" + "\n".join(
        "    " + x for x in lines
    )
    (result,) = load_manifests(text)
    assert "excessive aliasing" in str(result.error)


def test_go_template_placeholders_refused_then_rendered() -> None:
    text = "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: class-{{.Index}}\n"
    (refused,) = load_manifests(text)
    assert "Go template placeholder '{{.Index}}'" in str(refused.error) and "line 4" in str(refused.error)
    (rendered,) = load_manifests(substitute_index(text, 3))
    assert isinstance(rendered.obj, r1.DeviceClass) and rendered.obj.metadata.name == "class-3"


def test_list_fragment_and_scalars_are_not_objects(tmp_path: Path) -> None:
    path = tmp_path / "frag.yaml"
    path.write_text("- name: gpu-0\n---\njust a string\n")
    results = load_manifests(path)
    assert [r.source for r in results] == [str(path)] * 2
    assert "got a list" in str(results[0].error) and "got a str value" in str(results[1].error)


def test_missing_api_version_points_at_case_typo() -> None:
    (result,) = load_manifests("apiversion: v1\nkind: Pod\nmetadata: {name: p}\n")
    assert 'apiVersion not set (found "apiversion"' in str(result.error)
