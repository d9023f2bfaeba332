"""The claim controller's resync as a rolling sweep at a bounded rate.

Every pass syncs the pods and claims that changes marked (``dirty.py``); the resync, which catches
what a missed hint left behind, used to sync every pod and every claim in one pass every 5 s. That
pass costs in proportion to the cluster (1.2 s of CPU for 25,000 pods and claims on the 2-core dev
machine) and holds the event loop for all of it, so every pod created meanwhile waited. The sweep
walks the same keys a bounded number per pass instead: ``rate_per_s`` keys per second of time that
passed, never more than ``max_batch`` in one pass, and a new round starts when the last one is done
and at least ``min_round_s`` after the previous round began. A cluster of up to ``rate_per_s *
min_round_s`` objects is resynced every ``min_round_s`` as before; a bigger one takes longer per
round, and no pass waits for more than ``max_batch`` syncs. Pure: the service hands it the time and
the keys.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Sweep"]

Key = tuple[str, str]  # (namespace, name)
Keys = tuple[list[Key], list[Key]]  # (pods, claims)


class Sweep:
    def __init__(self, rate_per_s: float = 1000.0, min_round_s: float = 5.0, max_batch: int = 250) -> None:
        self.rate_per_s = rate_per_s
        self.min_round_s = min_round_s
        self.max_batch = max_batch
        self.rounds = 0
        self._pods: list[Key] = []
        self._claims: list[Key] = []
        self._round_began: float | None = None
        self._last: float | None = None
        self._credit = 0.0

    @property
    def pending(self) -> int:
        """Keys left in the current round."""
        return len(self._pods) + len(self._claims)

    def restart(self, now: float) -> None:
        """A full pass just synced everything: the next round is due ``min_round_s`` from now."""
        self._pods, self._claims = [], []
        self._round_began = self._last = now
        self._credit = 0.0

    def take(self, now: float, keys: Callable[[], Keys]) -> Keys:
        """The pods and claims to resync in this pass (``keys``: every key now, called when a
        round starts)."""
        if not self.pending and (self._round_began is None or now - self._round_began >= self.min_round_s):
            pods, claims = keys()
            self._pods, self._claims = pods[::-1], claims[::-1]  # popped from the end
            self._round_began = self._last = now
            self._credit = 0.0  # listing the keys was this pass's work
            self.rounds += 1
        if self._last is not None:
            # keys earned since the last pass (at most one pass's cap), spent now
            self._credit = min(self._credit + self.rate_per_s * max(0.0, now - self._last), self.max_batch)
        self._last = now
        budget = int(self._credit) if self.pending else 0
        self._credit -= budget
        pods = _pop(self._pods, budget)
        claims = _pop(self._claims, budget - len(pods))
        return pods, claims


def _pop(stack: list[Key], n: int) -> list[Key]:
    if n <= 0 or not stack:
        return []
    out = stack[-n:][::-1]
    del stack[-n:]
    return out
