"""The claim controller's resync sweep: every key once per round, a bounded number per pass, and
the pace set by the clock, not by the cluster's size."""

from __future__ import annotations

from draflow.services.claim_controller.sweep import Keys, Sweep


def _keys(n: int) -> Keys:
    return [("default", f"pod-{i}") for i in range(n)], [("default", f"claim-{i}") for i in range(n)]


def test_a_round_visits_every_pod_then_every_claim_once() -> None:
    sweep = Sweep(rate_per_s=40, min_round_s=5, max_batch=30)
    sweep.restart(0.0)
    seen_pods: list[tuple[str, str]] = []
    seen_claims: list[tuple[str, str]] = []
    now = 5.0
    while True:
        pods, claims = sweep.take(now, lambda: _keys(40))
        assert len(pods) + len(claims) <= 30
        seen_pods += pods
        seen_claims += claims
        now += 0.25  # 10 keys of budget per pass
        if not sweep.pending and len(seen_claims) == 40:
            break
    assert seen_pods == _keys(40)[0] and seen_claims == _keys(40)[1]
    assert sweep.rounds == 1
    assert sweep.take(now, lambda: _keys(40)) == ([], [])  # the next round waits for min_round_s
    assert sweep.take(10.0, lambda: _keys(40)) == ([], [])  # a new round: the keys listed
    assert sweep.rounds == 2
    assert sweep.take(10.25, lambda: _keys(40)) == (_keys(40)[0][:10], [])


def test_work_per_pass_does_not_grow_with_the_cluster() -> None:
    """The property that keeps a 25,000-pod cluster's passes as short as a 2,500-pod one's: the keys
    synced per pass depend on the time passed and the cap, never on how many objects exist."""
    for size in (100, 10_000, 50_000):
        sweep = Sweep(rate_per_s=800, min_round_s=5, max_batch=250)
        sweep.restart(0.0)
        calls = 0

        def every_key(n: int = size) -> Keys:
            nonlocal calls
            calls += 1
            return _keys(n)

        synced = [sum(map(len, sweep.take(5.0 + 0.0625 * i, every_key))) for i in range(1, 80)]
        assert max(synced) <= 50  # 800 keys/s x 62.5 ms
        assert sum(synced) == min(2 * size, 50 * 78)  # the first pass listed the keys
        assert calls == 1  # the keys are listed once per round, not per pass
        # a long pause accumulates budget, but one pass never syncs more than the cap
        assert sum(map(len, sweep.take(100.0, every_key))) <= 250


def test_a_full_pass_restarts_the_round() -> None:
    sweep = Sweep(rate_per_s=1000, min_round_s=5, max_batch=250)
    sweep.restart(0.0)
    sweep.take(5.0, lambda: _keys(1000))
    sweep.take(5.1, lambda: _keys(1000))
    assert sweep.pending
    sweep.restart(6.0)  # a full pass synced everything
    assert not sweep.pending
    assert sweep.take(7.0, lambda: _keys(1000)) == ([], [])
