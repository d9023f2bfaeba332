"""Scoped quotas: only matching pods are charged, claims never (upstream's claim evaluator)."""

from __future__ import annotations

import msgspec
import pytest

from draflow.events.api.codec import decode_object
from draflow.events.api.core_v1 import Pod, ResourceQuota
from draflow.services.apiserver.admission.quota import check_quota
from draflow.services.dra.quota.scopes import covers
from draflow.services.dra.quota.state import QuotaState
from draflow.services.quota_reconciler.reconcile import reconcile
from tests.builders import exact, make_claim, make_class, make_container, make_pod

pytestmark = pytest.mark.kep5004

GPU = "example.com/gpu"


def _quota(name: str, spec: dict[str, object]) -> ResourceQuota:
    obj = decode_object(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        }
    )
    assert isinstance(obj, ResourceQuota)
    return obj


def _priority(p: Pod, cls: str) -> Pod:
    return msgspec.structs.replace(p, spec=msgspec.structs.replace(p.spec, priority_class_name=cls))


def test_best_effort_scope_counts_only_best_effort_pods() -> None:
    q = _quota("be", {"hard": {"requests.example.com/gpu": 10}, "scopes": ["BestEffort"]})
    be = make_pod("be", containers=(make_container("c", requests={GPU: 1}),))
    burst = make_pod("burst", containers=(make_container("c", requests={GPU: 2, "cpu": "1"}),))
    state = QuotaState()
    state.apply(make_class("gpu.example.com", selectors=(), extended_resource_name=GPU))
    for o in (q, be, burst, make_claim("c", exact("a", device_class="gpu.example.com", count=4))):
        state.apply(o)
    (out,) = reconcile(state)
    assert out.status.used == {"requests.example.com/gpu": "1"}  # not burst's 2, not the claim's 4
    assert covers(q, be) and not covers(q, burst)


def test_priority_class_selector_and_admission() -> None:
    q = _quota(
        "high",
        {
            "hard": {"requests.example.com/gpu": 1},
            "scopeSelector": {
                "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]
            },
        },
    )
    state = QuotaState()
    state.apply(q)
    state.apply(_priority(make_pod("a", containers=(make_container("c", requests={GPU: 1}),)), "high"))
    low = _priority(make_pod("b", containers=(make_container("c", requests={GPU: 5}),)), "low")
    assert check_quota(low, [q], state) == []
    high = _priority(make_pod("b", containers=(make_container("c", requests={GPU: 1}),)), "high")
    (err,) = check_quota(high, [q], state)
    assert "exceeded quota: high, requested: requests.example.com/gpu=1" in str(err)
    assert check_quota(make_claim("c", exact("a", device_class="gpu.example.com", count=9)), [q], state) == []


def test_terminating_scope() -> None:
    q = _quota("t", {"hard": {"pods": 5}, "scopes": ["Terminating"]})
    p = make_pod("a", containers=())
    job = msgspec.structs.replace(p, spec=msgspec.structs.replace(p.spec, active_deadline_seconds=60))
    assert covers(q, job) and not covers(q, p)
    nt = _quota("nt", {"hard": {"pods": 5}, "scopes": ["NotTerminating"]})
    assert covers(nt, p) and not covers(nt, job)
