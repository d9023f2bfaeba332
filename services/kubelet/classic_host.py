"""The kubelet's side of the classic (KEP-3063) drivers: their kubelet plugins are their own
processes (``python -m draflow.services.drivers.classic_plugin --driver ...``), registered like any
DRA plugin and called over the same DRA v1 gRPC service.

:class:`ClassicKubelet` is what the kubelet service calls for a Pod with KEP claims
(``pod_claims(pod)`` is not None) instead of its structured DRA path:

* ``admit``: :func:`~draflow.services.kubelet.classic_admission.admit_on_node` (claim missing, not owned,
  not allocated, **pod not in reservedFor**, not available on this node, or its driver has no
  plugin registered here): a refusal is a Warning event and the Pod stays Pending, tried again
  later, as for structured claims;
* ``prepare``: one batched ``NodePrepareResources`` per driver with the claims' namespace, name and
  uid; the plugin reads each claim's classic allocation itself and writes the CDI specs; ``cdi``
  gives each container the CDI device names of the claims it lists;
* ``release``: ``NodeUnprepareResources`` for what was prepared for the Pod, then the Pod leaves
  the claims' ``reservedFor`` (appended at the claim's version; a conflict is retried on the next
  pass).

KEP-4381's numeric example driver, ``frobnicator.example.com``, is one of them too (its capacity
reaches the kubelet over its own stream: ``plugins.capacity``).

A call that fails as a whole (the plugin is gone, restarting, or timed out: ``PluginError``) is an
error of that pass; the Pod is tried again later. Both calls are idempotent on the plugin's side
(its own checkpoint), so a repeated call after a restart finds the work done.

The kubelet releases a Pod's claims when it is deleted and also when it finished (Succeeded or
Failed: ``holds`` tells the kubelet's ``next_step`` that this node still holds them).

With a ``state_dir`` (the kubelet's ``<data dir>/.../kubelet-<node>/classic``) the Pods' claims and
prepare results survive a restart (``pods.json``, written atomically after every prepare and
release): a restarted kubelet still unprepares a Pod that finishes or is deleted later (also one
deleted while it was down: ``release_vanished``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import core_v1 as c1
from draflow.events.api.classic_pod import pod_claims
from draflow.events.objects import status_updated
from draflow.services.dra.classic import claims as cl
from draflow.services.dra.classic.podclaims import pod_claim_refs
from draflow.services.dra.kubeletplugin import PluginError, PrepareResult
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers.classic_node import read_json, write_json
from draflow.services.kubelet.admission import Admit, Reject
from draflow.services.kubelet.classic_admission import admit_on_node, container_devices, prepare_batches
from draflow.services.kubelet.prepare import Outcome
from draflow.services.runtime.controller import Runtime

__all__ = ["KINDS", "ClassicKubelet", "ClassicPodState"]

KINDS = frozenset({cv.CLAIM_KIND})
PODS_CHECKPOINT = "pods.json"


class ClassicPodState(msgspec.Struct, frozen=True, kw_only=True):
    """What was prepared for one Pod: its claims per driver and the results per claim uid."""

    claims: dict[str, list[ClaimRef]] = {}
    results: dict[str, PrepareResult] = {}


class ClassicKubelet:
    def __init__(
        self,
        node_name: str,
        plugins: Mapping[str, Any],
        *,
        state_dir: Path | None = None,
    ) -> None:
        """``plugins``: driver name -> the plugin to call (the kubelet's ``PluginRegistry``: the
        registered instance's gRPC client; or a ``DRAPlugin`` object called in-process)."""
        self.node_name = node_name
        self.plugins = plugins
        self._checkpoint = state_dir / PODS_CHECKPOINT if state_dir is not None else None
        saved: dict[str, ClassicPodState] = (
            read_json(self._checkpoint, dict[str, ClassicPodState], {}) if self._checkpoint else {}
        )
        # pod uid -> driver -> claims; pod uid -> claim uid -> result
        self._prepared: dict[str, dict[str, list[ClaimRef]]] = {u: dict(s.claims) for u, s in saved.items()}
        self._results: dict[str, dict[str, PrepareResult]] = {u: dict(s.results) for u, s in saved.items()}

    def _save(self) -> None:
        if self._checkpoint is None:
            return
        state = {
            uid: ClassicPodState(claims=self._prepared[uid], results=self._results.get(uid, {}))
            for uid in sorted(self._prepared)
        }
        write_json(self._checkpoint, state)

    @staticmethod
    def handles(pod: c1.Pod) -> bool:
        return pod_claims(pod) is not None

    def holds(self, pod_uid: str) -> bool:
        return pod_uid in self._prepared

    def held_pods(self) -> frozenset[str]:
        return frozenset(self._prepared)

    @staticmethod
    def _claims(rt: Runtime, namespace: str) -> dict[str, cv.ResourceClaim]:
        return {c.metadata.name: c for c in rt.items(cv.CLAIM_KIND, namespace)}

    def admit(self, rt: Runtime, pod: c1.Pod) -> Admit | Reject:
        node = rt.get("Node", "", self.node_name)
        if not isinstance(node, c1.Node):
            return Reject("FailedPrepareDynamicResources", f"node {self.node_name} is not registered")
        claims = self._claims(rt, pod.metadata.namespace)
        reasons = admit_on_node(pod, claims, node)
        for driver in prepare_batches(pod, claims):
            if driver not in self.plugins:
                reasons.append(f"DRA driver {driver} is not registered on node {self.node_name}")
        if reasons:
            return Reject("FailedPrepareDynamicResources", "; ".join(reasons))
        return Admit()

    async def _call(self, driver: str, rpc: str, refs: Sequence[ClaimRef]) -> Any:
        """One batched call to ``driver``'s plugin; ``PluginError`` when it is not there or failed."""
        plugin = self.plugins.get(driver)
        if plugin is None:
            raise PluginError(f"DRA driver {driver} is not registered on node {self.node_name}")
        method = plugin.node_prepare_resources if rpc == "prepare" else plugin.node_unprepare_resources
        response = method(list(refs))
        return await response if inspect.isawaitable(response) else response

    async def prepare(self, rt: Runtime, pod: c1.Pod) -> Outcome:
        claims = self._claims(rt, pod.metadata.namespace)
        uid = pod.metadata.uid
        outcome = Outcome()
        results: dict[str, PrepareResult] = {}
        batches = prepare_batches(pod, claims)
        for driver, refs in sorted(batches.items()):
            # an in-process node plugin (one a test hands in) is handed the claims
            observe = getattr(self.plugins.get(driver), "observe", None)
            if observe is not None:
                for claim in (claims.get(ref.name) for ref in refs):
                    if claim is not None:
                        observe(claim)
            try:
                answer: Mapping[str, PrepareResult] = await self._call(driver, "prepare", refs)
            except PluginError as exc:
                outcome.errors.append(f"NodePrepareResources: {exc}")
                continue
            for ref in refs:
                result = answer.get(ref.uid) or PrepareResult(
                    error=f"DRA driver {driver} did not answer for claim {ref.namespace}/{ref.name}"
                )
                results[ref.uid] = result
                if result.error:
                    outcome.errors.append(result.error)
        self._prepared[uid] = batches  # what to unprepare, even after a partial failure
        self._results[uid] = results
        self._save()
        return outcome

    def cdi(self, rt: Runtime, pod: c1.Pod) -> dict[str, tuple[str, ...]]:
        claims = self._claims(rt, pod.metadata.namespace)
        return container_devices(pod, claims, self._results.get(pod.metadata.uid, {}))

    def container_claims(self, pod: c1.Pod) -> dict[str, list[tuple[ClaimRef, str, PrepareResult]]]:
        """Per container (init containers too) of a KEP-3063 Pod: ``(claim, driver, prepare result)``
        of each prepared claim it lists, in the order it lists them. Only this kubelet's own
        (checkpointed) state is read: the PodResources API answers from it."""
        kep = pod_claims(pod)
        prepared = self._prepared.get(pod.metadata.uid, {})
        results = self._results.get(pod.metadata.uid, {})
        if kep is None or not prepared:
            return {}
        by_name = {ref.name: (ref, driver) for driver, refs in prepared.items() for ref in refs}
        by_entry = {r.pod_claim_name: r.claim_name for r in pod_claim_refs(pod)}
        out: dict[str, list[tuple[ClaimRef, str, PrepareResult]]] = {}
        for used in (kep.init_containers, kep.containers):
            for container, entries in used.items():
                for entry in entries:
                    found = by_name.get(by_entry.get(entry, ""))
                    result = results.get(found[0].uid) if found is not None else None
                    if found is not None and result is not None and not result.error:
                        out.setdefault(container, []).append((found[0], found[1], result))
        return out

    async def unprepare(self, uid: str) -> list[str]:
        """``NodeUnprepareResources`` for what was prepared for the Pod ``uid``; forgets it when
        every driver succeeded. Returns the errors (empty: done). A driver whose plugin is not
        registered (yet, or any more) is an error: its devices are not released until it answers."""
        errors: list[str] = []
        for driver, refs in sorted(self._prepared.get(uid, {}).items()):
            try:
                answer: Mapping[str, str | None] = await self._call(driver, "unprepare", refs)
            except PluginError as exc:
                errors.append(f"NodeUnprepareResources: {exc}")
                continue
            for ref in refs:
                missing = f"DRA driver {driver} did not answer for claim {ref.namespace}/{ref.name}"
                err = answer.get(ref.uid, missing)
                if err:
                    errors.append(err)
        if errors:
            return errors
        if self._prepared.pop(uid, None) is not None:
            self._results.pop(uid, None)
            self._save()
        return []

    async def release_vanished(self, pods: Iterable[c1.Pod]) -> list[str]:
        """Unprepare for Pods that no longer exist at all (deleted while the kubelet was down;
        the driver-controller drops them from ``reservedFor``). Returns the errors."""
        known = {p.metadata.uid for p in pods}
        errors: list[str] = []
        for uid in sorted(self.held_pods() - known):
            errors.extend(await self.unprepare(uid))
        return errors

    async def release(self, rt: Runtime, pod: c1.Pod) -> list[str]:
        """Unprepare the Pod's claims on this node, then drop it from their ``reservedFor``.
        Returns the errors (empty: done)."""
        uid = pod.metadata.uid
        errors = await self.unprepare(uid)
        if errors:
            return errors
        if not self.handles(pod):
            return []
        ns = pod.metadata.namespace
        for claim in self._claims(rt, ns).values():
            if any(u.uid == uid for u in claim.status.reserved_for):
                event = status_updated(cv.CLAIM_KIND, cl.unreserved(claim, uid).status)
                if not await rt.append(cv.CLAIM_KIND, ns, claim.metadata.name, [event]):
                    errors.append(f"resourceclaim {claim.metadata.name} changed meanwhile")
        return errors
