"""The PodResources endpoint's token bucket, as the kubelet's (``golang.org/x/time/rate``).

Tokens refill at ``qps`` per second up to ``burst``; a call takes one or is refused. The kubelet's
defaults are 100 qps and a burst of 10 (upstream ``podresources/grpc/ratelimit.go``: "determined by
empirically reviewing known consumers of the API"); a refused call is gRPC ``RESOURCE_EXHAUSTED``
with the message ``rejected by rate limit`` and counts in no endpoint metric, as upstream, whose
interceptor refuses before the handler runs. Pure: the clock is passed in.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["DEFAULT_BURST", "DEFAULT_QPS", "REJECTED", "TokenBucket"]

DEFAULT_QPS = 100.0
DEFAULT_BURST = 10
REJECTED = "rejected by rate limit"


class TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst <= 0:
            raise ValueError(f"rate limit: qps and burst must be greater than 0 (got {qps}, {burst})")
        self.qps = float(qps)
        self.burst = int(burst)
        self._clock = clock
        self._tokens = float(burst)  # a new limiter starts full, as rate.NewLimiter
        self._at = clock()

    def allow(self) -> bool:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
