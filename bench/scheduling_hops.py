"""Where a pod's created → bound time goes: the per-hop breakdown of ``bench.scheduling``.

A pod's path is whatever the log holds for it, in log order
(:class:`bench.scheduling_cluster.Tracker` collects it): ``PodApplied`` → the claim controller's
``ResourceClaimApplied`` → ``PodClaimStatusesRecorded`` → the scheduler's ``SagaStarted`` → each
saga step's started / completed events of sagas recorded before → the device's ``GuardTaken`` →
``ClaimAllocated`` (with the pod's reservation; before: ``ClaimReserved`` and the take in its batch)
→ ``PodBound``. A hop is two consecutive events of one pod, named after them, so the breakdown
follows the code as it changes (an event merged away drops its hops, a new one adds its own) instead
of assuming today's sequence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from bench.harness import pct

__all__ = ["events_to_deletion", "hop_breakdown", "path_to_bound"]

Mark = tuple[int, float, str]


def path_to_bound(marks: list[Mark]) -> list[Mark]:
    """The pod's events in log order up to and including its first ``PodBound`` ([] if unbound)."""
    ordered = sorted(marks)
    for i, (_, _, label) in enumerate(ordered):
        if label == "PodBound":
            return ordered[: i + 1]
    return []


def hop_breakdown(paths: Iterable[list[Mark]]) -> dict[str, dict[str, float]]:
    """``"A → B"`` → p50/p99 (ms) and count over the pods' paths, in the order the hops occur
    (by their mean position in a path)."""
    samples: dict[str, list[float]] = {}
    where: dict[str, list[int]] = {}
    for path in paths:
        for i in range(1, len(path)):
            key = f"{path[i - 1][2]} → {path[i][2]}"
            samples.setdefault(key, []).append((path[i][1] - path[i - 1][1]) * 1000)
            where.setdefault(key, []).append(i)
    order = sorted(samples, key=lambda k: sum(where[k]) / len(where[k]))
    return {
        k: {
            "p50_ms": round(pct(samples[k], 0.5), 2),
            "p99_ms": round(pct(samples[k], 0.99), 2),
            "n": len(samples[k]),
        }
        for k in order
    }


def events_to_deletion(marks: Mapping[str, list[Mark]], deleted_at: Mapping[str, float]) -> list[int]:
    """Per pod uid in ``deleted_at``: how many events of its path were stored before the bench
    asked to delete it (its creation, claim, scheduling and binding, not its clean-up)."""
    return [sum(1 for _, ts, _ in marks.get(uid, ()) if ts < at) for uid, at in deleted_at.items()]


def print_hops(hops: Mapping[str, Mapping[str, float]]) -> None:
    if not hops:
        return
    width = max(len(k) for k in hops)
    print("created -> bound, per hop (storage times; p50 / p99 ms, pods):")
    for k, v in hops.items():
        print(f"  {k:<{width}}  {v['p50_ms']:8.2f} {v['p99_ms']:8.2f}  {int(v['n'])}")
