"""DRA Score: prefer the prioritized-list choice upstream prefers, then bin-pack devices.

Raw score of a node = ``points * 2^20 + (2^20 - 1 - free_after)`` where ``points`` is upstream's
prioritized-list score (for each firstAvailable request, 8 minus the index of the subrequest
taken) and ``free_after`` is how many devices matching the pod's requests stay free on the node
after the pod takes its share. So among nodes that can give the preferred subrequests, the one
left with the *fewest* free matching devices wins (best fit): large free blocks on other nodes
stay intact for pods that need many devices at once, and partially used nodes fill up before
fresh ones are broken into. Both numbers come from the Filter precheck (see ``precheck.py``),
which is what lets the framework run the allocator only on the node it is about to pick.

Normalization is by rank: distinct raw values, sorted, are spread evenly over [0, 100], so the
order survives the mapping to the framework's 0..100 range.
"""

from __future__ import annotations

from draflow.services.scheduler.framework.interface import MAX_NODE_SCORE
from draflow.services.scheduler.plugins.dynamicresources.precheck import Estimate

__all__ = ["normalize", "raw_score"]

_SPAN = 1 << 20


def raw_score(estimate: Estimate) -> int:
    points, free_after = estimate
    return points * _SPAN + (_SPAN - 1 - min(free_after, _SPAN - 1))


def normalize(scores: dict[str, int]) -> None:
    distinct = sorted(set(scores.values()))
    top = len(distinct) - 1
    if top <= 0:
        for name in scores:
            scores[name] = 0
        return
    rank = {value: i for i, value in enumerate(distinct)}
    for name, value in scores.items():
        scores[name] = MAX_NODE_SCORE * rank[value] // top
