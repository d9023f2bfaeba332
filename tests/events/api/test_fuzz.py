"""Mutated manifests never crash decode + defaulting + validation: each is a clear refusal
(naming object, field and rule) or a valid object. Seeds are the real-world corpus."""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import msgspec
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import decode_object
from draflow.events.api.errors import ApiError
from draflow.events.api.loader import load_manifests, substitute_index
from draflow.services.apiserver.admission import apply_defaults, validate
from tests.events.api.realworld_table import corpus_files

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@lru_cache(maxsize=1)
def seeds() -> list[dict[str, Any]]:
    out = []
    for path in corpus_files():
        for result in load_manifests(substitute_index(path.read_text(), 0)):
            if isinstance(result.raw, dict):
                out.append(result.raw)
    return out


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=80),
    st.sampled_from(
        ["", "UPPER_case", "a" * 300, "-lead", "x/y/z", "1Gi", "-5", "1e400", "0.5m", "{{.Index}}"]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_paths(v, (*prefix, i)))
    return out


@st.composite
def mutated(draw: st.DrawFn, pool: Callable[[], list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """A seed (from ``pool``, default the corpus) with one to four random mutations."""
    doc = copy.deepcopy(draw(st.sampled_from((pool or seeds)())))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = doc
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        action = draw(st.sampled_from(["replace", "delete", "unknown", "huge", "name"]))
        if action == "replace":
            parent[last] = draw(values)
        elif action == "delete" and isinstance(parent, dict):
            del parent[last]
        elif action == "unknown" and isinstance(parent[last], dict):
            parent[last][draw(st.text(min_size=1, max_size=10))] = draw(values)
        elif action == "huge":
            item = parent[last][0] if isinstance(parent[last], list) and parent[last] else draw(scalars)
            parent[last] = [copy.deepcopy(item) for _ in range(draw(st.sampled_from([33, 129, 300])))]
        elif action == "name":
            parent[last] = draw(st.text(min_size=0, max_size=300))
    return doc


def check_outcome(obj: ApiStruct | None, error: ApiError | None) -> None:
    """A clear refusal (object, field, rule) or an object the admission rules accept."""
    if error is not None:
        assert error.errors and all(str(e) for e in error.errors)
        assert "Traceback" not in str(error)
        return
    assert obj is not None
    for e in validate(apply_defaults(obj)):
        text = str(e)
        assert text.startswith(obj.KIND) and e.rule, text


@SETTINGS
@given(mutated())
def test_mutated_objects_are_refused_or_valid(doc: dict[str, Any]) -> None:
    try:
        obj = decode_object(doc)
    except ApiError as exc:
        check_outcome(None, exc)
    else:
        check_outcome(obj, None)


@SETTINGS
@given(mutated(), st.sampled_from(["yaml", "json"]))
def test_mutated_files_load_without_crashing(doc: dict[str, Any], fmt: str) -> None:
    text = msgspec.json.encode(doc).decode() if fmt == "json" else yaml.safe_dump(doc)
    for result in load_manifests(text + "\n---\n" + text):
        check_outcome(result.obj, result.error)


@SETTINGS
@given(st.sampled_from(range(8)), st.binary(min_size=1, max_size=40), st.integers(min_value=0))
def test_corrupted_bytes_load_without_crashing(which: int, junk: bytes, at: int) -> None:
    data = yaml.safe_dump(seeds()[which * 7 % len(seeds())]).encode()
    at %= len(data)
    for result in load_manifests(data[:at] + junk + data[at:]):
        check_outcome(result.obj, result.error)
