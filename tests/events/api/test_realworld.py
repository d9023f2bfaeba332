"""Every real-world manifest loads: valid objects decode, validate and re-encode to what was
written (after version conversion, quantities compared by value); invalid ones are refused with a
message naming the field; docs/api.md's outcome table matches what the code does today."""

from __future__ import annotations

from typing import Any

import pytest

from draflow.events.api.codec import encode_object
from draflow.events.quantity import Quantity, QuantityError
from tests.events.api.realworld_table import CORPUS, DOC, corpus_files, documented_table, outcome, table

OLD_RESOURCE = ("resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1alpha3")
FLAT_REQUEST = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
)


def _convert_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """An independent, dict-level rendering of the upstream conversion rules (to cross-check)."""
    version = raw.get("apiVersion")
    if version not in OLD_RESOURCE:
        return raw
    out = {**raw, "apiVersion": "resource.k8s.io/v1"}
    if version == "resource.k8s.io/v1beta2":
        return out
    spec = dict(raw.get("spec") or {})
    if raw["kind"] == "ResourceSlice":
        devices = []
        for dev in spec.get("devices") or []:
            basic = dict(dev.get("basic") or {})
            if version == "resource.k8s.io/v1alpha3" and "capacity" in basic:
                basic["capacity"] = {k: {"value": v} for k, v in basic["capacity"].items()}
            devices.append({"name": dev.get("name"), **basic})
        spec["devices"] = devices
    elif raw["kind"] in ("ResourceClaim", "ResourceClaimTemplate"):
        inner = dict(spec.get("spec") or {}) if raw["kind"] == "ResourceClaimTemplate" else spec
        reqs = []
        for r in (inner.get("devices") or {}).get("requests") or []:
            flat = {k: v for k, v in r.items() if k in FLAT_REQUEST}
            rest = {k: v for k, v in r.items() if k not in FLAT_REQUEST}
            reqs.append({**rest, "exactly": flat} if flat else rest)
        inner = {**inner, "devices": {**inner.get("devices", {}), "requests": reqs}}
        spec = {**spec, "spec": inner} if raw["kind"] == "ResourceClaimTemplate" else inner
    out["spec"] = spec
    return out


def _normalize(value: Any) -> Any:
    """Drop unset and zero values (null, false, 0, "", {}, []): encoding omits defaults."""
    if isinstance(value, dict):
        out = {k: _normalize(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, False, 0, "", {}, [])}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


def _same_quantity(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, str | int | float):
        return False
    try:
        return Quantity.parse(a) == Quantity.parse(b)
    except QuantityError:
        return False


def _diff(a: Any, b: Any, path: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}.{key}: only on one side"
            found = _diff(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _diff(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    if a == b or _same_quantity(a, b):
        return None
    return f"{path}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def outcomes() -> list[Any]:
    return [outcome(p) for p in corpus_files()]


def test_corpus_is_complete() -> None:
    assert len(corpus_files()) == 91
    assert (CORPUS / "SOURCES.md").is_file()


def test_documented_table_matches_reality() -> None:
    documented = documented_table(DOC.read_text(encoding="utf-8"))
    assert documented is not None, "docs/api.md lost its realworld table markers"
    assert documented == table(), (
        "run `python -m tests.events.api.realworld_table --write` and review the diff"
    )


def test_decoded_objects_re_encode_to_what_was_written(outcomes: list[Any]) -> None:
    checked = 0
    for o in outcomes:
        for result in o.results:
            if result.obj is None:
                continue
            want = _normalize(_convert_raw(result.raw))
            got = _normalize(encode_object(result.obj))
            problem = _diff(want, got)
            assert problem is None, f"{result.where}: {problem}"
            checked += 1
    assert checked > 190


def _refusals(outcomes: list[Any], suffix: str) -> list[str]:
    (match,) = [o for o in outcomes if o.path.endswith(suffix)]
    return match.rejected


def test_known_invalid_manifests_are_refused_naming_the_field(outcomes: list[Any]) -> None:
    assert _refusals(outcomes, "content__en__examples__dra__resourceclaim.yaml") == [
        "doc 1: ResourceClaim example-resource-claim: strict decoding error: "
        'unknown field "spec.devices.requests[0].exactly.selectors[0].expression"'
    ]
    (pod,) = _refusals(outcomes, "pod-inline-aligned-gpus.yaml")
    assert 'apiVersion not set (found "apiversion"' in pod
    (monitor,) = _refusals(outcomes, "monitor-pod-inline.yaml")
    assert "spec.spec.devices.requests[0].exactly.adminAccess: Forbidden" in monitor


def test_unserved_kinds_are_refused_while_the_rest_of_the_file_applies(outcomes: list[Any]) -> None:
    (match,) = [o for o in outcomes if o.path.endswith("podgroup-resourceclaimtemplate.yaml")]
    assert sorted(match.accepted) == ["Deployment", "Deployment", "Namespace", "ResourceClaimTemplate"]
    assert all(
        'no matches for kind "PodGroup" in version "scheduling.k8s.io/v1alpha2"' in r for r in match.rejected
    )


def test_lowercase_fields_in_an_otherwise_valid_pod_are_named() -> None:
    from draflow.events.api.loader import load_manifests

    path = (
        CORPUS
        / "intel__intel-resource-drivers-for-kubernetes"
        / "deployments__gpu__examples__pod-inline-aligned-gpus.yaml"
    )
    text = path.read_text().replace("apiversion:", "apiVersion:")
    errors = [str(r.error) for r in load_manifests(text) if r.error is not None]
    assert errors == [
        'Pod test-inline-claim: strict decoding error: unknown field "spec.restartpolicy" '
        '(did you mean "restartPolicy"? field names are case-sensitive)'
    ]
