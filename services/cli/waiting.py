"""What ``draflow delete`` waits for, and when it stops waiting.

kubectl waits for deleted objects to be gone (``--wait``, default true) for ``--timeout``; its
default 0 means a week, so a deletion held by a finalizer nobody removes (a pod on a dead node, a
namespace full of such pods) hangs without a word. draflow's default 0 means: wait as long as the
deletion makes progress, and give up after ``IDLE_LIMIT_S`` without any (an object gone, a
finalizer removed, fewer objects left in a namespace). Either way, once the wait takes more than
``REPORT_AFTER_S`` it says on stderr what it waits for, again whenever that changes, and on a
timeout names what is left: the finalizers still set and who removes them, pods whose kubelet has
not confirmed they stopped, a namespace's remaining content (upstream's
NamespaceContentRemaining / NamespaceFinalizersRemaining condition messages).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from events.api.registry import resource_types
from events.dra import DELETE_PROTECTION_FINALIZER
from events.objects import FOREGROUND_FINALIZER, ORPHAN_FINALIZER
from services.runtime.client import ApiClient

__all__ = ["IDLE_LIMIT_S", "REPORT_AFTER_S", "Progress", "describe", "parse_duration"]

IDLE_LIMIT_S = 60.0
REPORT_AFTER_S = 5.0
MAX_NAMES = 5

Obj = dict[str, Any]

# who removes the finalizers draflow knows (anything else was put there by whoever owns it)
FINALIZER_OWNERS = {
    ORPHAN_FINALIZER: "the garbage collector, after orphaning the dependents",
    FOREGROUND_FINALIZER: "the garbage collector, once the dependents that block it are gone",
    DELETE_PROTECTION_FINALIZER: "the claim controller, once the claim is no longer in use",
}

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds from a Go duration (``30s``, ``1m30s``, ``500ms``) or a plain number of seconds."""
    s = text.strip()
    try:
        return float(s)
    except ValueError:
        pass
    total, rest = 0.0, s
    while rest:
        i = 0
        while i < len(rest) and (rest[i].isdigit() or rest[i] == "."):
            i += 1
        j = i
        while j < len(rest) and not (rest[j].isdigit() or rest[j] == "."):
            j += 1
        number, unit = rest[:i], rest[i:j]
        if not number or unit not in _UNITS:
            raise ValueError(f'invalid duration "{text}"')
        total += float(number) * _UNITS[unit]
        rest = rest[j:]
    return total


class Progress:
    """Pure bookkeeping of one wait: has anything changed, is it time to report or to give up.

    ``timeout_s`` > 0 is a hard limit from the start (kubectl's ``--timeout``); 0 gives up after
    ``idle_s`` without a change of the observed state.
    """

    def __init__(self, now: float, timeout_s: float, idle_s: float = IDLE_LIMIT_S) -> None:
        self.start = now
        self.timeout_s = timeout_s
        self.idle_s = idle_s
        self.changed_at = now
        self.state: object = None
        self.reported_at: float | None = None
        self.reported: object = None

    def observe(self, now: float, state: object) -> None:
        if state != self.state:
            self.state = state
            self.changed_at = now

    def expired(self, now: float) -> bool:
        if self.timeout_s > 0:
            return now - self.start >= self.timeout_s
        return now - self.changed_at >= self.idle_s

    def report_due(self, now: float, description: object) -> bool:
        """Say what we wait for once the wait is long, and again when that changed (not more
        often than every ``REPORT_AFTER_S``)."""
        if now - self.start < REPORT_AFTER_S or description == self.reported:
            return False
        if self.reported_at is not None and now - self.reported_at < REPORT_AFTER_S:
            return False
        self.reported_at, self.reported = now, description
        return True

    def limit_text(self) -> str:
        if self.timeout_s > 0:
            return f"after {self.timeout_s:g}s (--timeout)"
        return f"after {self.idle_s:g}s without progress (--timeout=0)"


def _names(names: list[str]) -> str:
    more = len(names) - MAX_NAMES
    return ", ".join(names[:MAX_NAMES]) + (f" and {more} more" if more > 0 else "")


def object_reasons(obj: Obj) -> list[str]:
    """Why one object with a deletionTimestamp is still there."""
    meta = obj.get("metadata") or {}
    reasons = []
    for fin in meta.get("finalizers") or []:
        who = FINALIZER_OWNERS.get(fin)
        reasons.append(f"finalizer {fin}" + (f" (removed by {who})" if who else ""))
    if obj.get("kind") == "Pod" and (obj.get("spec") or {}).get("nodeName") and meta.get("deletionTimestamp"):
        node = obj["spec"]["nodeName"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace:
            reasons.append(
                f'the kubelet on node "{node}" has not confirmed the pod stopped (grace period {grace}s)'
            )
    if not meta.get("deletionTimestamp") and not reasons:
        reasons.append("not marked for deletion")
    return reasons


async def namespace_reasons(client: ApiClient, namespace: str) -> list[str]:
    """What keeps a Terminating namespace: its remaining content, their finalizers, held pods."""
    counts: Counter[str] = Counter()
    finalizers: Counter[str] = Counter()
    held: list[str] = []
    for rt in resource_types():
        if not rt.namespaced:
            continue
        items, _ = await client.list(rt.kind, namespace=namespace)
        if not items:
            continue
        counts[f"{rt.plural}.{rt.group}" if rt.group else rt.plural] += len(items)
        for obj in items:
            meta = obj.get("metadata") or {}
            for fin in meta.get("finalizers") or []:
                finalizers[fin] += 1
            node = (obj.get("spec") or {}).get("nodeName")
            if rt.kind == "Pod" and node and meta.get("deletionTimestamp") and not meta.get("finalizers"):
                held.append(f"{meta.get('name')} (node {node})")
    reasons = []
    if counts:
        parts = ", ".join(f"{r} has {n} resource instances" for r, n in sorted(counts.items()))
        reasons.append(f"Some resources are remaining: {parts}")
    if finalizers:
        parts = ", ".join(f"{f} in {n} resource instances" for f, n in sorted(finalizers.items()))
        reasons.append(f"Some content in the namespace has finalizers remaining: {parts}")
    if held:
        reasons.append(f"pods waiting for their kubelet to confirm they stopped: {_names(sorted(held))}")
    return reasons


async def describe(client: ApiClient, obj: Obj) -> list[str]:
    """Why ``obj`` (the object as it is now) is not gone yet."""
    if obj.get("kind") == "Namespace":
        name = str((obj.get("metadata") or {}).get("name") or "")
        return await namespace_reasons(client, name) or object_reasons(obj)
    return object_reasons(obj)
