"""ResourceQuota and numeric (classic) claims: counted by the reconciler's state, refused by admission."""

from __future__ import annotations

import pytest

from draflow.events.api import classic_v1alpha1 as cv
from draflow.services.apiserver.admission.quota import check_quota
from draflow.services.dra.quota.state import QuotaState, status_of
from tests.builders import make_quota
from tests.builders.classic import make_classic_claim

pytestmark = pytest.mark.kep4381

HARD = {"count/resourceclaims.cdi.k8s.io": 3, "frob.resourceclass.cdi.k8s.io/resourceclaims": 1}


def test_classic_claims_are_counted_per_group_and_class() -> None:
    state = QuotaState()
    quota = make_quota("q", HARD)
    state.apply(quota)
    state.apply(make_classic_claim("a", "frob"))
    state.apply(make_classic_claim("b", "fpga"))
    assert state.namespace_usage("default") == {
        "count/resourceclaims.cdi.k8s.io": 2,
        "fpga.resourceclass.cdi.k8s.io/resourceclaims": 1,
        "frob.resourceclass.cdi.k8s.io/resourceclaims": 1,
    }
    assert status_of(quota, state.quota_usage(quota), state.index).used == {
        "count/resourceclaims.cdi.k8s.io": "2",
        "frob.resourceclass.cdi.k8s.io/resourceclaims": "1",
    }
    state.delete(cv.CLAIM_KIND, "default", "a")
    assert state.namespace_usage("default") == state.recomputed_usage("default")
    assert "frob.resourceclass.cdi.k8s.io/resourceclaims" not in state.namespace_usage("default")


def test_admission_refuses_a_numeric_claim_over_quota() -> None:
    state = QuotaState()
    quota = make_quota("q", HARD)
    state.apply(quota)
    state.apply(make_classic_claim("a", "frob"))
    problems = check_quota(make_classic_claim("b", "frob"), [quota], state)
    assert [p.rule for p in problems] == [
        "forbidden: exceeded quota: q, requested: frob.resourceclass.cdi.k8s.io/resourceclaims=1, "
        "used: frob.resourceclass.cdi.k8s.io/resourceclaims=1, "
        "limited: frob.resourceclass.cdi.k8s.io/resourceclaims=1"
    ]
    assert check_quota(make_classic_claim("c", "fpga"), [quota], state) == []
