"""The claim controller service: ``sync_pod`` / ``sync_claim`` over the cache, event-driven.

Every change marks the pods and claims it can affect; each is synced in a task of its own as soon
as the loop sees the change (a rolling sweep resyncs all of them) against the cache (the log
folded, see :mod:`draflow.services.runtime.controller`), turning the deciders' actions into
writes (:mod:`draflow.services.runtime.claimwrites`). A ``CreateClaim``'s name is derived from
the pod's uid, so a replayed decision hits ``AlreadyExists`` and a claim created before a crash
is adopted by the decider's crash recovery on the next sync.

Numeric claims (KEP-4381: classic claims allocated by the scheduler from published capacity) are
deallocated here directly once unused (:mod:`draflow.services.claim_controller.numeric`).

A claim left with a deletion timestamp and no finalizers (its finalizer was dropped by a
``ClaimDeallocated`` fact, which cannot delete) is deleted again, which removes it for good.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import cast

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.codec import object_meta
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.projections.objects import Change
from draflow.services.claim_controller.controller import sync_claim, sync_pod_from
from draflow.services.claim_controller.dirty import Dependencies, claim_pod_names
from draflow.services.claim_controller.numeric import is_numeric_allocated, sync_numeric_claim
from draflow.services.claim_controller.sweep import Keys, Sweep
from draflow.services.runtime.claimwrites import execute
from draflow.services.runtime.controller import Runtime

__all__ = ["ClaimControllerService"]

log = logging.getLogger(__name__)

ACTOR = "claim-controller"
SWEEP_WAKE_S = 0.25  # the longest pause between passes (the resync sweep's pace when idle)
KINDS = frozenset({"Pod", "ResourceClaim", "ResourceClaimTemplate", cv.CLAIM_KIND})


class _ClaimNames:
    """Whether a claim name is in use in one namespace, asked of the cache (no list built)."""

    def __init__(self, rt: Runtime, namespace: str) -> None:
        self.rt = rt
        self.namespace = namespace

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.rt.get("ResourceClaim", self.namespace, name) is not None


class ClaimControllerService:
    """Event-driven syncs: every change marks the pods and claims it can affect (see
    :mod:`draflow.services.claim_controller.dirty`), and each of those is synced in a task of its
    own as soon as the pass that found it runs (:mod:`draflow.services.runtime.keyed`: one sync
    per object at a time, at most ``concurrency`` at once), so a pod created while other objects'
    round trips are in flight does not wait for them. The first pass (and one after a pass
    failed) syncs every pod then every claim and waits for all of them; after that a rolling
    sweep (:mod:`.sweep`) resyncs every pod and claim at most ``sweep_rate_per_s`` a second, each
    round at least ``full_resync_s`` apart, so a missed hint is caught up without a pass that
    costs the whole cluster. A sync that fails is submitted again after a backoff (0.1 s doubling
    per failure of that object, at most 5 s). Each decider gets only the objects it reads,
    looked up by key, so a sync costs what it syncs, not the cluster's size."""

    def __init__(
        self,
        rt: Runtime,
        *,
        full_resync_s: float = 5.0,
        sweep_rate_per_s: float = 1000.0,
        concurrency: int = 64,
    ) -> None:
        self.rt = rt
        self.concurrency = concurrency  # objects synced at once
        rt.kinds = KINDS
        self.full_resync_s = full_resync_s
        self.deps = Dependencies()
        self._full_due = True  # the first pass, and the one after a failed pass
        self.sweep = Sweep(sweep_rate_per_s, full_resync_s)
        self.full_passes = 0
        self.syncs = rt.keyed_syncs(concurrency=concurrency, on_failure=self._failed)
        self._failures: dict[Hashable, int] = {}  # object -> failed syncs in a row
        # KEP-4381: numeric claims to look at (changed), and whether any pod changed since
        self._numeric_dirty: set[tuple[str, str]] = set()
        self._pods_changed = False
        rt.cache.listen(self._on_change)

    def _on_change(self, kind: str, namespace: str, name: str, change: Change) -> None:
        if kind == cv.CLAIM_KIND:
            self._numeric_dirty.add((namespace, name))
            return
        if kind == "Pod":
            self._pods_changed = True
        if kind in KINDS:
            self.deps.on_change(kind, namespace, name, change)

    def _all_keys(self) -> Keys:
        """Every pod and claim key, unsorted (each pass sorts the few it syncs)."""
        index = self.rt.cache.index
        pods = [(m.namespace or "", m.name) for m in map(object_meta, index.values("Pod"))]
        claims = [(m.namespace or "", m.name) for m in map(object_meta, index.values("ResourceClaim"))]
        return pods, claims

    async def sync(self) -> None:
        rt = self.rt
        now = time.monotonic()
        full = self._full_due
        dirty = self.deps.take()
        rounds = self.sweep.rounds
        try:
            if full:
                self._full_due = False
                self.full_passes += 1
                all_pods, all_claims = rt.items("Pod"), rt.items("ResourceClaim")
                self.deps.rebuild(all_pods, all_claims)
                pods = [(p.metadata.namespace, p.metadata.name) for p in all_pods]
                claims = [(c.metadata.namespace, c.metadata.name) for c in all_claims]
                self.sweep.restart(now)
                await self.syncs.join()  # what earlier passes started reads no older state
                await self._each(pods, self._sync_pod)
                await self._each(claims, self._sync_claim_key)
            else:
                swept_pods, swept_claims = self.sweep.take(now, self._all_keys)
                # what changed first, then the sweep's share (its syncs rarely act)
                order: list[tuple[list[tuple[str, str]], str, Callable[[str, str], Awaitable[None]]]] = [
                    (sorted(dirty.pods), "Pod", self._sync_pod),
                    (sorted(dirty.claims), "ResourceClaim", self._sync_claim_key),
                    (sorted(set(swept_pods) - dirty.pods), "Pod", self._sync_pod),
                    (sorted(set(swept_claims) - dirty.claims), "ResourceClaim", self._sync_claim_key),
                ]
                for keys, kind, sync in order:
                    for ns, name in keys:
                        self._submit((kind, ns, name), sync)
            await self._sync_numeric(full or self.sweep.rounds != rounds)
        except BaseException:
            self._full_due = True  # the hints taken are lost: the retry is a full pass
            raise

    def _submit(self, key: tuple[str, str, str], sync: Callable[[str, str], Awaitable[None]]) -> None:
        async def one() -> None:
            await sync(key[1], key[2])
            self._failures.pop(key, None)

        self.syncs.submit(key, one)

    def _failed(self, key: Hashable, exc: BaseException) -> None:
        """Submit a failed object again after a backoff (by way of the dirty set and a pass)."""
        n = self._failures[key] = self._failures.get(key, 0) + 1
        kind, ns, name = cast(tuple[str, str, str], key)

        def retry() -> None:
            target = self.deps.dirty.pods if kind == "Pod" else self.deps.dirty.claims
            target.add((ns, name))
            self.rt.kick()

        asyncio.get_running_loop().call_later(min(0.1 * 2 ** (n - 1), 5.0), retry)

    async def _each(self, keys: list[tuple[str, str]], sync: Callable[[str, str], Awaitable[None]]) -> None:
        """Sync independent objects concurrently (each one's writes stay in order): a pod's claim
        takes round trips to the apiserver and the log, and the next pod must not wait for them.
        Every key is synced; the first failure is raised afterwards (the pass is then retried)."""
        if len(keys) <= 1:
            for ns, name in keys:
                await sync(ns, name)
            return
        sem = asyncio.Semaphore(self.concurrency)

        async def one(ns: str, name: str) -> None:
            async with sem:
                await sync(ns, name)

        outcomes = await asyncio.gather(*(one(ns, name) for ns, name in keys), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _sync_claim_key(self, ns: str, name: str) -> None:
        current = self.rt.get("ResourceClaim", ns, name)
        if current is not None:
            await self._sync_claim(current)

    async def _sync_pod(self, ns: str, name: str) -> None:
        rt = self.rt
        pod = rt.get("Pod", ns, name)
        if pod is None or pod.metadata.deletion_timestamp is not None or not pod.spec.resource_claims:
            return  # sync_pod leaves these alone
        owned = self.deps.owned_by(ns, pod.metadata.uid)
        actions = sync_pod_from(pod, rt.get, owned, _ClaimNames(rt, ns))
        if actions:
            async with rt.step("Pod", ns, name, "claim-controller sync pod"):
                await execute(rt, actions)

    async def _sync_numeric(self, full: bool) -> None:
        """KEP-4381: drop gone users of numeric claims and deallocate the unused ones."""
        rt = self.rt
        if full or self._pods_changed:
            keys = {(c.metadata.namespace, c.metadata.name) for c in rt.items(cv.CLAIM_KIND)}
        else:
            keys = set(self._numeric_dirty)
        self._numeric_dirty.clear()
        self._pods_changed = False
        for ns, name in sorted(keys):
            claim = rt.get(cv.CLAIM_KIND, ns, name)
            if not isinstance(claim, cv.ResourceClaim):
                continue
            meta = claim.metadata
            if meta.deletion_timestamp is not None and not meta.finalizers:
                await rt.delete(cv.CLAIM_KIND, ns, name, uid=meta.uid)
                continue
            if not is_numeric_allocated(claim):
                continue
            pods = {u.name: rt.get("Pod", ns, u.name) for u in claim.status.reserved_for}
            events = sync_numeric_claim(claim, pods)
            if events:
                async with rt.step(cv.CLAIM_KIND, ns, name, "claim-controller numeric claim"):
                    await rt.append(cv.CLAIM_KIND, ns, name, events)

    async def _sync_claim(self, claim: ResourceClaim) -> None:
        meta = claim.metadata
        if meta.deletion_timestamp is not None and not meta.finalizers:
            await self.rt.delete("ResourceClaim", meta.namespace, meta.name, uid=meta.uid)
            return
        pods = [self.rt.get("Pod", meta.namespace, n) for n in sorted(claim_pod_names(claim))]
        actions = sync_claim(claim, [p for p in pods if p is not None])
        if actions:
            async with self.rt.step(
                "ResourceClaim", meta.namespace, meta.name, "claim-controller sync claim"
            ):
                await execute(self.rt, actions)
