"""When the kubelet tries again to start a pod whose resources it could not prepare.

Upstream's kubelet never fails a pod because ``PrepareDynamicResources`` failed (a claim not
found, not reserved for the pod, not allocated, a driver not registered, or the driver's
NodePrepareResources failing): ``SyncPod`` records a ``FailedPrepareDynamicResources`` Warning
and returns the error, the pod stays ``Pending``, and its pod worker tries again after a backoff
(``backOffPeriod``, 10 s). Here the first retries come sooner (``base`` doubling per failure) and
the wait is capped at upstream's 10 s, so a claim that becomes ready is noticed quickly and a
broken one costs one attempt every 10 s. Pure: the caller passes the clock reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DEFAULT_BASE_S", "DEFAULT_MAX_S", "PrepareBackoff", "retry_delay"]

DEFAULT_BASE_S = 0.5
DEFAULT_MAX_S = 10.0  # upstream kubelet's pod worker backOffPeriod


def retry_delay(failures: int, base_s: float = DEFAULT_BASE_S, max_s: float = DEFAULT_MAX_S) -> float:
    """The wait after the ``failures``-th failed attempt in a row (1, 2, ...)."""
    if failures < 1:
        return 0.0
    return min(base_s * 2 ** (failures - 1), max_s)


@dataclass
class PrepareBackoff:
    """Failed start attempts per pod uid and when the next one is due."""

    base_s: float = DEFAULT_BASE_S
    max_s: float = DEFAULT_MAX_S
    _failures: dict[str, tuple[int, float]] = field(default_factory=dict)  # uid -> (failures, due at)

    def due(self, uid: str, now: float) -> bool:
        """May the pod be tried now? (True when it never failed.)"""
        _, at = self._failures.get(uid, (0, 0.0))
        return now >= at

    def failed(self, uid: str, now: float) -> float:
        """Record a failed attempt at ``now``; returns how long to wait before the next one."""
        failures = self._failures.get(uid, (0, 0.0))[0] + 1
        delay = retry_delay(failures, self.base_s, self.max_s)
        self._failures[uid] = (failures, now + delay)
        return delay

    def failures(self, uid: str) -> int:
        return self._failures.get(uid, (0, 0.0))[0]

    def forget(self, uid: str) -> None:
        """The pod started, or is being released: forget its failures."""
        self._failures.pop(uid, None)
