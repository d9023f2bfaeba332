"""Why a pod fits nowhere: per-node statuses and kube-scheduler's FitError message.

The message has upstream's shape (``pkg/scheduler/framework/types.go``, ``FitError.Error``)::

    0/4 nodes are available: 1 Insufficient cpu, 3 cannot allocate all claims.

``0/<all nodes> nodes are available:``, then either the PreFilter rejection message followed by
a period, or the histogram of per-node reasons ("<count> <reason>" sorted as strings, joined by
", ", then a period). Upstream appends PostFilter messages (the preemption summary, and DRA's
"still not schedulable"); draflow has no preemption and keeps the PostFilter outcome in its own
field instead, so the message ends with the histogram.
"""

from __future__ import annotations

import heapq
import re

from draflow.services.scheduler.framework.status import Status

__all__ = ["NO_NODES_MESSAGE", "Diagnosis"]

NO_NODES_MESSAGE = "no nodes available to schedule pods"

_DIGITS = re.compile(r"(\d+)")


def _natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """node-2 before node-10."""
    return tuple((1, int(p)) if p.isdigit() else (0, p) for p in _DIGITS.split(name))


class Diagnosis:
    """Statuses of rejected nodes and the plugins that rejected the pod."""

    __slots__ = (
        "_histogram",
        "node_statuses",
        "post_filter_message",
        "pre_filter_message",
        "unschedulable_plugins",
    )

    def __init__(self) -> None:
        self.node_statuses: dict[str, Status] = {}
        self.unschedulable_plugins: set[str] = set()
        self.pre_filter_message = ""
        self.post_filter_message = ""
        self._histogram: list[tuple[str, int]] | None = None

    def reject_node(self, node: str, status: Status) -> None:
        self._histogram = None
        self.node_statuses[node] = status
        if status.plugin:
            self.unschedulable_plugins.add(status.plugin)

    def histogram(self) -> list[tuple[str, int]]:
        """(reason, node count), ordered as upstream orders the message parts."""
        if self._histogram is None:
            per_status: dict[tuple[str, ...], int] = {}
            for status in self.node_statuses.values():
                per_status[status.reasons] = per_status.get(status.reasons, 0) + 1
            counts: dict[str, int] = {}
            for reasons, n in per_status.items():
                for reason in reasons:
                    counts[reason] = counts.get(reason, 0) + n
            self._histogram = sorted(counts.items(), key=lambda item: f"{item[1]} {item[0]}")
        return self._histogram

    def nodes_by_reason(self, limit: int) -> dict[str, tuple[str, ...]]:
        """reason -> the first ``limit`` rejected node names (sorted): which nodes, not only how
        many, without storing 500 names per attempt."""
        per_reason: dict[str, list[str]] = {}
        for node, status in self.node_statuses.items():
            for reason in status.reasons:
                per_reason.setdefault(reason, []).append(node)
        return {r: tuple(heapq.nsmallest(limit, nodes, key=_natural)) for r, nodes in per_reason.items()}

    def plugin_reasons(self) -> dict[str, tuple[str, ...]]:
        seen: dict[str, dict[str, None]] = {}
        for status in dict.fromkeys(self.node_statuses.values()):
            bucket = seen.setdefault(status.plugin, {})
            for reason in status.reasons:
                bucket[reason] = None
        return {plugin: tuple(reasons) for plugin, reasons in sorted(seen.items())}

    def message(self, num_nodes: int) -> str:
        text = f"0/{num_nodes} nodes are available:"
        if self.pre_filter_message:
            return f"{text} {self.pre_filter_message}."
        parts = [f"{count} {reason}" for reason, count in self.histogram()]
        if parts:
            text += f" {', '.join(parts)}."
        return text
