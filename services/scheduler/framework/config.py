"""Scheduler knobs, with the defaults draflow picks and why (see docs/scheduler.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from draflow.services.dra.structured import Features

__all__ = ["SchedulerConfig", "num_feasible_nodes_to_find"]


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """``percentage_of_nodes_to_score``: None = kube-scheduler's adaptive rule (50% minus 1% per
    125 nodes, at least 5%), otherwise a fixed percentage (100 = look at every node). At least
    ``min_feasible_nodes_to_find`` feasible nodes are looked for either way (upstream: 100).

    ``allocator_max_steps`` bounds one allocator call (deterministic); a node that runs out is
    "timed out trying to allocate devices". ``allocator_timeout_s`` is upstream's wall-clock
    filter timeout (DRASchedulerFilterTimeout, 10 s), with the same outcome: a safety net that
    also stops CEL selectors which stay under the cost limit but are slow on many devices (the
    static cost estimate upstream checks at admission is not computed here).
    """

    scheduler_name: str = "default-scheduler"
    percentage_of_nodes_to_score: int | None = None
    min_feasible_nodes_to_find: int = 100
    min_feasible_nodes_percentage: int = 5
    allocator_max_steps: int | None = 200_000
    allocator_timeout_s: float | None = 10.0
    features: Features = field(default_factory=Features)
    initial_backoff_seconds: float = 1.0
    max_backoff_seconds: float = 10.0
    max_unschedulable_seconds: float = 300.0
    # a pod the leftover flush moved that PreEnqueue gates again is looked at again after this
    # long (upstream's flushUnschedulablePodsLeftover runs every 30 s)
    unschedulable_flush_interval_seconds: float = 30.0


def num_feasible_nodes_to_find(config: SchedulerConfig, num_nodes: int) -> int:
    """How many feasible nodes to find before scoring (upstream ``numFeasibleNodesToFind``)."""
    minimum = config.min_feasible_nodes_to_find
    if num_nodes < minimum:
        return num_nodes
    percentage = config.percentage_of_nodes_to_score
    if percentage is None or percentage <= 0:
        percentage = 50 - num_nodes // 125
        if percentage < config.min_feasible_nodes_percentage:
            percentage = config.min_feasible_nodes_percentage
    if percentage >= 100:
        return num_nodes
    found = num_nodes * percentage // 100
    return max(found, minimum)
