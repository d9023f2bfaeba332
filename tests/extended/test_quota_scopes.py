"""Scoped quotas: only matching pods are charged, claims never (upstream's claim evaluator)."""

from __future__ import annotations

import msgspec

from events.api.codec import decode_object
from events.api.core_v1 import Pod, ResourceQuota
from services.apiserver.admission.quota import check_quota
from services.dra.quota.scopes import covers
from services.dra.quota.state import QuotaState
from services.quota_reconciler.reconcile import reconcile
from tests.extended.helpers import container, device_class, pod
from tests.extended.quota_helpers import claim, exact

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
    be = pod("be", containers=(container("c", requests={GPU: 1}),))
    burst = pod("burst", containers=(container("c", requests={GPU: 2, "cpu": "1"}),))
    state = QuotaState()
    state.apply(device_class("gpu.example.com", GPU))
    for o in (q, be, burst, claim("c", [exact("a", "gpu.example.com", 4)])):
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
    state.apply(_priority(pod("a", containers=(container("c", requests={GPU: 1}),)), "high"))
    low = _priority(pod("b", containers=(container("c", requests={GPU: 5}),)), "low")
    assert check_quota(low, [q], state) == []
    high = _priority(pod("b", containers=(container("c", requests={GPU: 1}),)), "high")
    (err,) = check_quota(high, [q], state)
    assert "exceeded quota: high, requested: requests.example.com/gpu=1" in str(err)
    assert check_quota(claim("c", [exact("a", "gpu.example.com", 9)]), [q], state) == []


def test_terminating_scope() -> None:
    q = _quota("t", {"hard": {"pods": 5}, "scopes": ["Terminating"]})
    p = pod("a")
    job = msgspec.structs.replace(p, spec=msgspec.structs.replace(p.spec, active_deadline_seconds=60))
    assert covers(q, job) and not covers(q, p)
    nt = _quota("nt", {"hard": {"pods": 5}, "scopes": ["NotTerminating"]})
    assert covers(nt, p) and not covers(nt, job)
