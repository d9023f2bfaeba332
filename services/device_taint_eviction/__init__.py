"""The device taint eviction controller: pods using devices with a NoExecute taint they do not
tolerate are evicted (kube-controller-manager's ``device-taint-eviction-controller``).

``planner`` decides (pure), ``service`` appends and deletes, ``python -m
draflow.services.device_taint_eviction`` runs it.
"""

from draflow.services.device_taint_eviction.planner import (
    CONDITION_TYPE,
    EVICTION_EVENT_REASON,
    EVICTION_MESSAGE,
    EVICTION_REASON,
    ClaimEviction,
    EvictionPlan,
    PodEviction,
    claim_eviction,
    plan_evictions,
    rule_condition,
)

__all__ = [
    "CONDITION_TYPE",
    "EVICTION_EVENT_REASON",
    "EVICTION_MESSAGE",
    "EVICTION_REASON",
    "ClaimEviction",
    "EvictionPlan",
    "PodEviction",
    "claim_eviction",
    "plan_evictions",
    "rule_condition",
]
