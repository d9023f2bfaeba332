"""Each ResourceQuota scope rule on its own, as upstream's pod scope function decides it.

The rules (pkg/quota/v1/evaluator/core/pods.go with the apiserver's generic ``Matches``): every
scope of ``spec.scopes`` is an ``Exists`` requirement, followed by ``spec.scopeSelector``; all must
match; PriorityClass is a label selector over the single label ``PriorityClass=<name>`` (absent when
the pod names no class); a scope the pod evaluator does not know matches no pod.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from draflow.events.api.codec import decode_object
from draflow.events.api.core_v1 import (
    Pod,
    ResourceQuota,
    ResourceRequirements,
    ScopedResourceSelectorRequirement,
)
from draflow.services.dra.quota.scopes import covers, selectors
from tests.builders import exact, make_claim, make_container, make_pod

pytestmark = pytest.mark.kep5004


def _quota(spec: dict[str, Any], namespace: str = "default") -> ResourceQuota:
    obj = decode_object(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "q", "namespace": namespace},
            "spec": {"hard": {"pods": 10}, **spec},
        }
    )
    assert isinstance(obj, ResourceQuota)
    return obj


def _scoped(*scopes: str) -> ResourceQuota:
    return _quota({"scopes": list(scopes)})


def _selected(scope: str, operator: str, *values: str) -> ResourceQuota:
    expr: dict[str, Any] = {"scopeName": scope, "operator": operator}
    if values:
        expr["values"] = list(values)
    return _quota({"scopeSelector": {"matchExpressions": [expr]}})


def _spec(pod: Pod, **changes: Any) -> Pod:
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, **changes))


def _pod(
    name: str = "p", *, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
) -> Pod:
    return make_pod(name, containers=(make_container("c", requests=requests, limits=limits),))


# -- selectors ------------------------------------------------------------------------------------


def test_selectors_turn_scopes_into_exists_before_the_scope_selector() -> None:
    q = _quota(
        {
            "scopes": ["Terminating", "BestEffort"],
            "scopeSelector": {
                "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]
            },
        }
    )
    assert selectors(q) == [
        ScopedResourceSelectorRequirement(scope_name="Terminating", operator="Exists"),
        ScopedResourceSelectorRequirement(scope_name="BestEffort", operator="Exists"),
        ScopedResourceSelectorRequirement(scope_name="PriorityClass", operator="In", values=("high",)),
    ]


def test_an_unscoped_quota_has_no_selectors_and_covers_pods_and_claims_of_its_namespace() -> None:
    q = _quota({})
    assert selectors(q) == []
    assert covers(q, _pod(requests={"cpu": "1"}))
    assert covers(q, make_claim("c", exact("a", device_class="gpu.example.com")))


# -- namespace ------------------------------------------------------------------------------------


def test_a_quota_covers_nothing_outside_its_namespace() -> None:
    q = _quota({}, namespace="team-a")
    assert not covers(q, make_pod("p", namespace="team-b"))
    assert covers(q, make_pod("p", namespace="team-a"))


def test_an_object_without_metadata_is_never_covered() -> None:
    assert not covers(_quota({}), object())


def test_scoped_quota_never_covers_a_claim_even_when_the_scope_would_match_a_pod() -> None:
    q = _scoped("NotTerminating")
    assert covers(q, _pod())
    assert not covers(q, make_claim("c", exact("a", device_class="gpu.example.com")))


# -- Terminating / NotTerminating -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("deadline", "terminating"), [(None, False), (0, True), (1, True), (3600, True), (-1, False)]
)
def test_terminating_means_an_active_deadline_of_zero_or_more(
    deadline: int | None, terminating: bool
) -> None:
    pod = _spec(_pod(), active_deadline_seconds=deadline)
    assert covers(_scoped("Terminating"), pod) is terminating
    assert covers(_scoped("NotTerminating"), pod) is not terminating


# -- BestEffort / NotBestEffort -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "best_effort"),
    [
        ({}, True),
        ({"requests": {"example.com/gpu": "1", "ephemeral-storage": "1Gi"}}, True),
        ({"requests": {"cpu": "100m"}}, False),
        ({"requests": {"memory": "64Mi"}}, False),
        ({"limits": {"cpu": "1"}}, False),
        ({"limits": {"memory": "1Gi"}}, False),
    ],
)
def test_best_effort_looks_only_at_cpu_and_memory(
    resources: dict[str, dict[str, str]], best_effort: bool
) -> None:
    pod = _pod(requests=resources.get("requests"), limits=resources.get("limits"))
    assert covers(_scoped("BestEffort"), pod) is best_effort
    assert covers(_scoped("NotBestEffort"), pod) is not best_effort


def test_best_effort_counts_init_containers_and_every_container() -> None:
    init_limited = make_pod(
        "init",
        containers=(make_container("c"),),
        init_containers=(make_container("setup", limits={"memory": "32Mi"}),),
    )
    second_requests = make_pod(
        "two", containers=(make_container("a"), make_container("b", requests={"cpu": "10m"}))
    )
    for pod in (init_limited, second_requests):
        assert not covers(_scoped("BestEffort"), pod), pod.metadata.name
        assert covers(_scoped("NotBestEffort"), pod), pod.metadata.name


def test_a_zero_amount_does_not_count_against_best_effort() -> None:
    """Upstream's QoS counts only cpu/memory amounts above zero."""
    for resources in ({"requests": {"cpu": "0"}}, {"limits": {"memory": "0Mi", "cpu": "0m"}}):
        pod = _pod(requests=resources.get("requests"), limits=resources.get("limits"))
        assert covers(_scoped("BestEffort"), pod), resources
        assert not covers(_scoped("NotBestEffort"), pod), resources


def test_pod_level_resources_decide_best_effort_when_the_pod_has_them() -> None:
    """With ``spec.resources`` set, upstream's QoS reads only the pod-level amounts."""
    pod_level = _spec(_pod(), resources=ResourceRequirements(requests={"cpu": "1"}))
    assert not covers(_scoped("BestEffort"), pod_level)
    assert covers(_scoped("NotBestEffort"), pod_level)
    # pod-level resources without cpu/memory above zero: BestEffort, whatever the containers ask
    zero = _spec(_pod(requests={"cpu": "500m"}), resources=ResourceRequirements(limits={"memory": "0"}))
    assert covers(_scoped("BestEffort"), zero)


# -- PriorityClass --------------------------------------------------------------------------------

_HIGH = _spec(_pod("high"), priority_class_name="high")
_LOW = _spec(_pod("low"), priority_class_name="low")
_NONE = _pod("none")


@pytest.mark.parametrize(
    ("operator", "values", "covered"),
    [
        ("In", ("high",), {"high"}),
        ("In", ("high", "low"), {"high", "low"}),
        ("NotIn", ("high",), {"low", "none"}),  # a pod without a class has no label: NotIn holds
        ("Exists", (), {"high", "low"}),
        ("DoesNotExist", (), {"none"}),
    ],
)
def test_priority_class_operators(operator: str, values: tuple[str, ...], covered: set[str]) -> None:
    q = _selected("PriorityClass", operator, *values)
    assert {p.metadata.name for p in (_HIGH, _LOW, _NONE) if covers(q, p)} == covered


def test_priority_class_in_spec_scopes_means_any_class() -> None:
    q = _scoped("PriorityClass")
    assert covers(q, _HIGH) and covers(q, _LOW) and not covers(q, _NONE)


# -- CrossNamespacePodAffinity --------------------------------------------------------------------


def _term(**extra: Any) -> dict[str, Any]:
    return {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}, **extra}


@pytest.mark.parametrize(
    ("affinity", "cross"),
    [
        (None, False),
        (
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
            False,
        ),
        ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term()]}}, False),
        ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(namespaces=[])]}}, False),
        (
            {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [_term(namespaces=["other"])]
                }
            },
            True,
        ),
        (
            {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [_term(namespaceSelector={})]
                }
            },
            True,
        ),
        (
            {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "podAffinityTerm": _term(namespaces=["other"])}
                    ]
                }
            },
            True,
        ),
        (
            {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 5, "podAffinityTerm": _term()},
                        {
                            "weight": 1,
                            "podAffinityTerm": _term(namespaceSelector={"matchLabels": {"t": "x"}}),
                        },
                    ]
                }
            },
            True,
        ),
        (
            {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 5, "podAffinityTerm": _term()}
                    ]
                }
            },
            False,
        ),
    ],
)
def test_cross_namespace_pod_affinity(affinity: dict[str, Any] | None, cross: bool) -> None:
    pod = make_pod("p", containers=(make_container("c"),), affinity=affinity)
    assert covers(_scoped("CrossNamespacePodAffinity"), pod) is cross


# -- combinations and unknown scopes --------------------------------------------------------------


def test_every_scope_must_match() -> None:
    q = _quota(
        {
            "scopes": ["Terminating", "BestEffort"],
            "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "Exists"}]},
        }
    )
    job = _spec(_pod("job"), active_deadline_seconds=30, priority_class_name="batch")
    assert covers(q, job)
    assert not covers(q, _spec(job, active_deadline_seconds=None))
    assert not covers(q, _spec(job, priority_class_name=""))
    burstable = make_pod("b", containers=(make_container("c", requests={"cpu": "1"}),))
    assert not covers(q, _spec(burstable, active_deadline_seconds=30, priority_class_name="batch"))


def test_a_scope_the_pod_evaluator_does_not_know_matches_no_pod() -> None:
    # VolumeAttributesClass scopes PersistentVolumeClaims; the pod evaluator answers false for it
    q = _selected("VolumeAttributesClass", "In", "gold")
    assert not covers(q, _pod())
    assert not covers(q, _HIGH)
