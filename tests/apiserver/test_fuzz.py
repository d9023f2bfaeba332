"""Fuzzing the apiserver with mutated real manifests: clear answers only, and a clean log.

Real objects from the corpus get random mutations (a field replaced by a value of the wrong type,
a field removed, a list or map blown up, a bad name, junk keys, odd text). Every reply must be a
Kubernetes-style rejection (4xx, no traceback) or an accepted object, and afterwards every
object in the log must be one the admission rules accept. Invalid UTF-8 and malformed requests
get a 400 too.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.api.base import ApiStruct
from events.api.loader import load_manifests
from events.objects import kind_and_verb
from infra.eventstore import EventStore
from services.apiserver.admission import validate
from services.cli.manifests import parse_text
from services.runtime.client import ApiClient

CORPUS = Path(__file__).resolve().parents[1] / "data" / "realworld"


def _bases() -> list[dict[str, Any]]:
    """One valid object of each kind and shape from the corpus (a few per kind)."""
    per_kind: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(CORPUS.rglob("*.yaml")):
        for r in load_manifests(path):
            if r.ok and isinstance(r.raw, dict) and len(per_kind.setdefault(r.raw["kind"], [])) < 4:
                per_kind[r.raw["kind"]].append(r.raw)
    return [copy.deepcopy(m) for objs in per_kind.values() for m in objs]


BASES = _bases()
NAMESPACES = sorted(
    {m["metadata"]["namespace"] for m in BASES if isinstance(m["metadata"].get("namespace"), str)}
    - {"default"}
)


@pytest.fixture
async def fuzz_api(api: ApiClient) -> ApiClient:
    """The client, with the namespaces the corpus objects live in already created."""
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in NAMESPACES]
    assert all(r.error is None for r in await api.apply(docs))
    return api


WRONG = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=4),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=3),
)
BAD_NAMES = st.one_of(
    st.text(max_size=80),
    st.sampled_from(["", "UPPER", "a.b..c", "-x", "x-", "a*b", "a>b", "a~b", "a b", "ä", "x" * 300, "a/b"]),
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent, key = _parent(doc, path), path[-1]
        op = draw(st.sampled_from(["wrong", "drop", "huge", "name", "junk", "text"]))
        if op == "wrong":
            parent[key] = draw(WRONG)
        elif op == "drop":
            del parent[key]
        elif op == "huge":
            value = parent[key]
            if isinstance(value, list) and value:
                parent[key] = value * draw(st.integers(40, 400))
            elif isinstance(value, dict):
                parent[key] = {f"k{i}.example.com/x{i}": "v" for i in range(draw(st.integers(100, 3000)))}
            else:
                parent[key] = "y" * draw(st.integers(300, 70_000))
        elif op == "name" and isinstance(doc.get("metadata", {}), dict):
            doc.setdefault("metadata", {})["name"] = draw(BAD_NAMES)
        elif op == "junk" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(WRONG)
        elif op == "text":
            parent[key] = draw(st.text(alphabet=st.characters(codec="utf-8"), max_size=30))
    return doc


def _check(results: list[Any]) -> None:
    for r in results:
        if r.error is None:
            assert r.outcome in ("created", "configured", "unchanged")
            continue
        assert 400 <= r.error.code < 500, r.error  # a clear rejection, never a server failure
        assert r.error.message and "Traceback" not in r.error.message


async def _log_holds_only_valid_objects(store: EventStore) -> int:
    """Every Applied object in the log passes admission (as a create, or as an update of the last)."""
    last: dict[str, ApiStruct] = {}
    checked = 0
    for env in await store.events(f"{store.root}.ev.>"):
        kv = kind_and_verb(env.type)
        if kv is None or kv[1] != "Applied":
            continue
        obj = env.data.object  # type: ignore[attr-defined]
        assert validate(obj, last.get(env.subject)) == [], (env.subject, validate(obj, last.get(env.subject)))
        last[env.subject] = obj
        checked += 1
    return checked


@pytest.mark.timeout(240)
@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(docs=st.lists(mutated(), min_size=1, max_size=4))
async def test_mutated_manifests_get_clear_answers(fuzz_api: ApiClient, docs: list[dict[str, Any]]) -> None:
    _check(await fuzz_api.apply(docs))


async def test_log_never_contains_a_rejected_object(fuzz_api: ApiClient, event_store: EventStore) -> None:
    @settings(max_examples=80, deadline=None, derandomize=True, database=None)
    @given(docs=st.lists(mutated(), min_size=1, max_size=4))
    def examples(docs: list[dict[str, Any]]) -> None:
        batches.append(docs)

    batches: list[list[dict[str, Any]]] = []
    examples()
    for docs in batches:
        _check(await fuzz_api.apply(docs))
    assert await _log_holds_only_valid_objects(event_store) > 0


@pytest.mark.parametrize(
    "payload",
    [
        b'{"items": [{"manifest": {"apiVersion": "v1", "kind": "Namespace", '
        b'"metadata": {"name": "\xff\xfe"}}}]}',
        b'{"items": [{"manifest": "\\ud800"}]}',
        b'{"items": 5}',
        b'{"items": [{"manifest": ' + b"[" * 3000 + b"]" * 3000 + b"}]}",
        b"[]",
        b"",
    ],
)
async def test_malformed_requests_are_bad_requests(api: ApiClient, payload: bytes) -> None:
    reply = msgspec.json.decode(
        (await api.nc.request(f"{api.settings.root}.api.apply", payload, timeout=5)).data
    )
    assert reply["error"]["code"] == 400 and reply["error"]["reason"] == "BadRequest"


async def test_deeply_nested_objects_are_refused(api: ApiClient) -> None:
    params: Any = "x"
    for _ in range(300):
        params = {"a": params}
    doc = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "deep.example.com"},
        "spec": {"config": [{"opaque": {"driver": "deep.example.com", "parameters": params}}]},
    }
    (res,) = await api.apply([doc])
    assert res.error is not None and res.error.message == "object nested deeper than 100 levels"


async def test_invalid_utf8_and_surrogates_from_files(api: ApiClient) -> None:
    (doc,) = parse_text(b"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: \xff\n", "bad.yaml")
    assert doc.error == "error parsing bad.yaml: not valid UTF-8 (byte 49)"
    (surrogate,) = parse_text(b'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "\\udc80"\n', "s.yaml")
    (res,) = await api.apply([surrogate.manifest])
    assert res.error is not None and res.error.code == 400
