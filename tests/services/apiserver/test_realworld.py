"""Every real-world manifest (tests/data/realworld, copies of ../shared/realworld) against the system.

Each file is read the way ``draflow apply -f FILE`` reads it and applied to the running apiserver;
the outcome of every object must agree with the pure pipeline (``load_manifests`` + defaulting +
validation, plus the apiserver's namespace rule): valid objects are stored and read back with the
same spec (after version conversion and defaulting), invalid ones are refused with a message that
names the offending field. Between files everything a file created is deleted again, so files that
reuse names (pod0, gpu.example.com) do not meet.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import encode_object, object_meta
from draflow.events.api.errors import FieldError
from draflow.events.api.loader import LoadResult, load_manifests, substitute_index
from draflow.events.api.registry import lookup_resource
from draflow.services.apiserver.admission import apply_defaults, check_admin_access, validate
from draflow.services.apiserver.admission.tolerations import DefaultTolerationSeconds
from draflow.services.apiserver.server import BOOTSTRAP_NAMESPACES
from draflow.services.apiserver.strategy import prepare_create
from draflow.services.cli.manifests import parse_text
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import StatusError
from tests.events.api.realworld_table import corpus_files, outcome
from tests.paths import TESTS

CORPUS = TESTS / "data" / "realworld"
FILES = sorted(p for p in CORPUS.rglob("*.yaml"))
# Objects the system stores and refuses over the whole corpus; one of the refusals is a namespace
# the file does not create (README "Real manifests").
STORED, REFUSED, MISSING_NS = 196, 14, 1


def _content(path: Path) -> bytes:
    """The file as applied: scheduler_perf templates rendered with ``{{.Index}}`` = 0, as it does."""
    text = path.read_text(encoding="utf-8")
    return (substitute_index(text, 0) if "{{" in text else text).encode()


CONTENTS = {p: _content(p) for p in FILES}


def expected_errors(obj: ApiStruct, namespaces: dict[str, dict[str, str]]) -> list[FieldError] | str:
    """What the pure pipeline says about one decoded object: field errors, a namespace problem, or []."""
    rt = lookup_resource(obj.KIND)
    assert rt is not None
    ns = (object_meta(obj).namespace or "default") if rt.namespaced else ""
    stored = apply_defaults(prepare_create(obj), ns or "default")
    errors = validate(stored)
    if errors:
        return errors
    if ns and ns not in namespaces:
        return f'namespaces "{ns}" not found'
    return check_admin_access(stored, namespaces.get(ns, {})) if ns else []


def rejection_names_field(message: str, errors: list[FieldError]) -> bool:
    return any(e.path and e.path in message for e in errors) or not any(e.path for e in errors)


async def apply_file(
    api: ApiClient, path: Path, data: bytes
) -> tuple[list[LoadResult], list[tuple[Any, str]]]:
    """Apply as the CLI does; per object: (ItemResult or None, client-side error text). Objects with
    only ``generateName`` are refused by apply (as kubectl does), so those are sent with create."""
    docs = parse_text(data, str(path))
    results = iter(await api.apply([d.manifest for d in docs if not d.error], source=str(path)))
    outcomes: list[tuple[Any, str]] = []
    for doc in docs:
        if doc.error:
            outcomes.append((None, doc.error))
            continue
        result = next(results)
        if result.error is not None and "cannot use generate name with apply" in result.error.message:
            (result,) = await api.apply([doc.manifest], source=str(path), create_only=True)
        outcomes.append((result, ""))
    return load_manifests(data, name=str(path)), outcomes


async def clean_up(api: ApiClient, created: list[tuple[str, str, str]]) -> None:
    for kind, ns, name in reversed(created):
        try:
            await api.delete([(kind, ns, name)], grace_period_seconds=0)
            obj = await api.get(kind, name, namespace=ns)
        except StatusError:
            continue
        finalizers = obj["metadata"].get("finalizers", [])
        if finalizers:
            await api.finalize(kind, name, namespace=ns, remove=finalizers)


def _taint_times(want: dict[str, Any], got: dict[str, Any]) -> None:
    """The apiserver stamps device taints that have no ``timeAdded`` with the time of the write
    (upstream's defaulting, which needs a clock the pure pipeline has not): take the stored times
    for those, after checking they are timestamps."""
    taints: list[tuple[dict[str, Any], dict[str, Any]]] = []
    if want.get("kind") == "DeviceTaintRule":
        taints.append((want["spec"]["taint"], got["spec"]["taint"]))
    elif want.get("kind") == "ResourceSlice":
        for wd, gd in zip(want["spec"].get("devices", []), got["spec"].get("devices", []), strict=True):
            taints += list(zip(wd.get("taints", []), gd.get("taints", []), strict=True))
    for w, g in taints:
        if "timeAdded" not in w:
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", g["timeAdded"]), g
            w["timeAdded"] = g["timeAdded"]


@pytest.mark.timeout(120)
async def test_every_real_world_file_agrees_with_the_pure_pipeline(api: ApiClient) -> None:
    assert len(FILES) >= 90
    stored = refused = missing_ns = 0
    for path in FILES:
        pure, outcomes = await apply_file(api, path, CONTENTS[path])
        where = path.relative_to(CORPUS)
        assert len(pure) == len(outcomes), f"{where}: the CLI and the loader split the file differently"
        namespaces: dict[str, dict[str, str]] = {n: {} for n in BOOTSTRAP_NAMESPACES}
        created: list[tuple[str, str, str]] = []
        for load, (result, client_error) in zip(pure, outcomes, strict=True):
            if load.obj is None:  # the loader refuses it: so must the system, naming the field
                assert load.error is not None
                message = client_error or (result.error.message if result and result.error else "")
                assert message, f"{where}: {load.error} was accepted by the system"
                assert rejection_names_field(message, load.error.errors), (
                    f"{where}: {message!r} vs {load.error}"
                )
                refused += 1
                continue
            expect = expected_errors(load.obj, namespaces)
            assert result is not None, f"{where}: {client_error}"
            if expect:
                assert result.error is not None, f"{where}: {load.obj.KIND} accepted, expected {expect}"
                detail = expect if isinstance(expect, str) else ""
                assert detail in result.error.message
                if isinstance(expect, list):
                    assert rejection_names_field(result.error.message, expect), result.error.message
                refused += 1
                missing_ns += isinstance(expect, str)
                continue
            assert result.error is None, f"{where}: {result.error}"
            assert result.outcome in ("created", "configured", "unchanged")
            kind, ns, name = result.kind, result.namespace, result.name
            got = await api.get(kind, name, namespace=ns)
            # defaulting, then the mutating admission (DefaultTolerationSeconds adds to Pods)
            want = encode_object(DefaultTolerationSeconds().admit(apply_defaults(load.obj, ns or "default")))
            _taint_times(want, got)
            assert got.get("spec") == want.get("spec"), f"{where}: {kind} {ns}/{name} spec differs"
            assert got["metadata"]["uid"] and got["metadata"]["resourceVersion"]
            if kind == "Namespace":
                namespaces[name] = object_meta(load.obj).labels
            created.append((kind, ns, name))
            stored += 1
        await clean_up(api, created)
    # The same totals as the per-file table in docs/api.md (tests/events/api/realworld_table.py), except
    # objects whose namespace the file does not create: the table assumes it exists, a fresh system
    # refuses them ("namespaces ... not found").
    table = [outcome(p) for p in corpus_files()]
    assert stored + missing_ns == sum(len(o.accepted) for o in table)
    assert refused - missing_ns == sum(len(o.results) for o in table) - sum(len(o.accepted) for o in table)
    assert (stored, refused, missing_ns) == (STORED, REFUSED, MISSING_NS), (stored, refused, missing_ns)
