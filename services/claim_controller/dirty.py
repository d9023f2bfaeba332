"""Which pods and claims a cache change can affect, so a pass syncs those instead of everything.

The claim controller's deciders look at few objects: ``sync_pod`` at the claims its pod names
(``spec.resourceClaims[].resourceClaimName``, ``status.resourceClaimStatuses``), the claims the pod
owns (crash-recovery adoption) and the templates it uses; ``sync_claim`` at the pods in its
``reservedFor`` and its owner pod. :class:`Dependencies` keeps those links as reverse indexes, fed
by the cache's change callback, and turns each change into dirty pod / claim keys. It is only a
hint: the service still runs a full pass on a timer, so a missed link costs latency, not
correctness.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from events.api.core_v1 import Pod
from events.api.resource_v1 import ResourceClaim
from projections.objects import Change
from services.dra.resourceclaim import owning_pod

__all__ = ["Dependencies", "Dirty", "claim_pod_names", "pod_claim_names"]

Key = tuple[str, str]  # (namespace, name)


def pod_claim_names(pod: Pod) -> set[str]:
    """Claims a pod names: by ``resourceClaimName`` or recorded in its status."""
    names = {c.resource_claim_name for c in pod.spec.resource_claims if c.resource_claim_name}
    names.update(s.resource_claim_name for s in pod.status.resource_claim_statuses if s.resource_claim_name)
    return names


def claim_pod_names(claim: ResourceClaim) -> set[str]:
    """Pods ``sync_claim`` looks at: those in ``reservedFor`` and the owner."""
    names = {r.name for r in claim.status.reserved_for if r.api_group == "" and r.resource == "pods"}
    owner = owning_pod(claim)
    if owner is not None:
        names.add(owner.name)
    return names


@dataclass
class Dirty:
    pods: set[Key] = field(default_factory=set)
    claims: set[Key] = field(default_factory=set)


class _Links:
    """A many-to-many link (source key → target names), with the reverse lookup by target."""

    def __init__(self) -> None:
        self._fwd: dict[Key, frozenset[str]] = {}
        self._rev: defaultdict[Key, set[str]] = defaultdict(set)

    def assign(self, ns: str, name: str, targets: Iterable[str]) -> frozenset[str]:
        """Replace the source's targets; returns the old ones."""
        new = frozenset(targets)
        old = self._fwd.pop((ns, name), frozenset())
        for t in old - new:
            users = self._rev[(ns, t)]
            users.discard(name)
            if not users:
                del self._rev[(ns, t)]
        for t in new - old:
            self._rev[(ns, t)].add(name)
        if new:
            self._fwd[(ns, name)] = new
        return old

    def sources(self, ns: str, target: str) -> set[str]:
        return self._rev.get((ns, target), set())

    def clear(self) -> None:
        self._fwd.clear()
        self._rev.clear()


class Dependencies:
    """Reverse indexes over the cache: claims by owner pod uid and the pod ↔ claim/template links."""

    def __init__(self) -> None:
        self.dirty = Dirty()
        self._owned = _Links()  # claim → uid of its owner pod
        self._claim_pods = _Links()  # claim → pod names sync_claim reads
        self._pod_claims = _Links()  # pod → claim names it refers to
        self._pod_templates = _Links()  # pod → template names it uses

    def take(self) -> Dirty:
        out, self.dirty = self.dirty, Dirty()
        return out

    def owned_by(self, namespace: str, pod_uid: str) -> set[str]:
        """Names of the claims controlled by the pod with this uid."""
        return self._owned.sources(namespace, pod_uid)

    def rebuild(self, pods: Iterable[Pod], claims: Iterable[ResourceClaim]) -> None:
        """Index from scratch (the full pass: the cache may have been folded before we listened)."""
        for links in (self._owned, self._claim_pods, self._pod_claims, self._pod_templates):
            links.clear()
        for pod in pods:
            self._index_pod(pod.metadata.namespace, pod.metadata.name, pod)
        for claim in claims:
            self._index_claim(claim.metadata.namespace, claim.metadata.name, claim)

    def on_change(self, kind: str, namespace: str, name: str, change: Change) -> None:
        """The cache's listener: update the links and mark what the change can affect."""
        obj = change.object
        if kind == "Pod" and isinstance(obj, Pod):
            self.dirty.pods.add((namespace, name))
            claims = set(self._claim_pods.sources(namespace, name))
            claims |= self._owned.sources(namespace, obj.metadata.uid)
            claims |= self._index_pod(namespace, name, None if change.type == "DELETED" else obj)
            claims |= pod_claim_names(obj)
            self.dirty.claims.update((namespace, c) for c in claims)
        elif kind == "ResourceClaim" and isinstance(obj, ResourceClaim):
            self.dirty.claims.add((namespace, name))
            pods = set(self._pod_claims.sources(namespace, name))
            pods |= self._index_claim(namespace, name, None if change.type == "DELETED" else obj)
            pods |= claim_pod_names(obj)
            self.dirty.pods.update((namespace, p) for p in pods)
        elif kind == "ResourceClaimTemplate":
            self.dirty.pods.update((namespace, p) for p in self._pod_templates.sources(namespace, name))

    def _index_pod(self, ns: str, name: str, pod: Pod | None) -> frozenset[str]:
        """(Re)index one pod; returns the claim names it referred to before."""
        templates: set[str] = set()
        claims: set[str] = set()
        if pod is not None:
            templates = {c.resource_claim_template_name or "" for c in pod.spec.resource_claims} - {""}
            claims = pod_claim_names(pod)
        self._pod_templates.assign(ns, name, templates)
        return self._pod_claims.assign(ns, name, claims)

    def _index_claim(self, ns: str, name: str, claim: ResourceClaim | None) -> frozenset[str]:
        """(Re)index one claim; returns the pod names it pointed at before."""
        owner = owning_pod(claim) if claim is not None else None
        self._owned.assign(ns, name, [owner.uid] if owner is not None else [])
        return self._claim_pods.assign(ns, name, claim_pod_names(claim) if claim is not None else ())
