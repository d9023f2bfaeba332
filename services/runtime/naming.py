"""Generated object names, as Kubernetes makes them, with an injectable suffix source.

The API server's ``generateName`` expansion (``k8s.io/apiserver/pkg/storage/names``): the base
is cut to 58 characters and 5 random characters from a restricted alphabet (no vowels, no
``0 1 3``, to avoid words) are appended, giving at most 63. (The claim controller's prefix for
claims generated from templates is ``draflow.services.dra.resourceclaim.generate_claim_name_prefix``.)

Upstream draws the suffix from a process-wide RNG. A decider must not (its decisions are replayed),
so the suffix comes from a :class:`SuffixSource`: :func:`hash_suffix` derives it from a stable key
(the same decision on replay gives the same name), :class:`SeededSuffixes` is a seeded RNG for tests
and simulations. Both draw from the same alphabet.

The key must be unique over the cluster's life, not just among the live objects, or the names
repeat (a Deployment scaled 0 -> 30 -> 0 -> 30 would bring back the same 30 names): it names
something that happens once in the log — a pod's uid for the claims made for it, the stream
sequence of the last event a workload decision consumed (plus the index within that decision)
for the pods a Deployment or Job creates.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Container
from typing import Protocol

__all__ = [
    "ALPHANUMS",
    "MAX_GENERATED_BASE_LEN",
    "MAX_NAME_LEN",
    "RANDOM_LEN",
    "SeededSuffixes",
    "SuffixSource",
    "generate_name",
    "hash_suffix",
    "safe_encode",
    "unique_generated_name",
]

# k8s.io/apimachinery/pkg/util/rand: the alphabet of rand.String and SafeEncodeString.
ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
MAX_NAME_LEN = 63
RANDOM_LEN = 5
MAX_GENERATED_BASE_LEN = MAX_NAME_LEN - RANDOM_LEN  # 58


class SuffixSource(Protocol):
    """Returns ``RANDOM_LEN`` characters of ``ALPHANUMS`` for ``key``; ``attempt`` > 0 after a clash."""

    def __call__(self, key: str, attempt: int) -> str: ...


def safe_encode(text: str) -> str:
    """``rand.SafeEncodeString``: map each character onto the alphabet by its code point."""
    return "".join(ALPHANUMS[ord(ch) % len(ALPHANUMS)] for ch in text)


def hash_suffix(key: str, attempt: int) -> str:
    """A suffix that is a pure function of ``(key, attempt)``: replaying a decision renames nothing."""
    digest = hashlib.sha256(f"{attempt}\x00{key}".encode()).digest()
    return "".join(ALPHANUMS[b % len(ALPHANUMS)] for b in digest[:RANDOM_LEN])


class SeededSuffixes:
    """A seeded RNG suffix source (ignores the key), for tests and simulations."""

    def __init__(self, seed: int | str = 0) -> None:
        self._rng = random.Random(seed)

    def __call__(self, key: str, attempt: int) -> str:
        return "".join(self._rng.choice(ALPHANUMS) for _ in range(RANDOM_LEN))


def generate_name(base: str, suffix: str) -> str:
    """The API server's expansion of ``generateName``: ``base[:58] + suffix``."""
    if len(suffix) != RANDOM_LEN:
        raise ValueError(f"generated name suffix must have {RANDOM_LEN} characters, got {suffix!r}")
    return base[:MAX_GENERATED_BASE_LEN] + suffix


def unique_generated_name(
    base: str, key: str, taken: Container[str], suffixes: SuffixSource = hash_suffix
) -> str:
    """Expand ``base`` like the API server, drawing again while the name is already ``taken``.

    Upstream the API server retries a clashing generated name a few times; here the decider knows
    the namespace's names, so it simply avoids them (27^5 names per base: clashes are rare).
    """
    for attempt in range(1000):
        name = generate_name(base, suffixes(key, attempt))
        if name not in taken:
            return name
    raise RuntimeError(f"no free generated name for base {base!r} after 1000 attempts")
