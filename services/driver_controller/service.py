"""The driver-controller service: level-triggered passes of the classic deciders over the cache.

Built on the shared controller runtime (:mod:`draflow.services.runtime.controller`: the log folded
into an in-memory cache, a pass after every change, appends at the version held). One pass:

1. plugins ``observe`` the Nodes and driver-owned inventory objects (``NodeGpuCapacity``) and, on
   the first pass, every allocated claim (books rebuilt);
2. the classic claim controller: ``sync_pod`` for Pods with KEP claims; a missing ``<pod>-<name>``
   claim is admitted (``admit_classic``) and created on its subject with expected sequence 0;
   claims whose owning Pod is gone are marked for deletion;
3. per claim and plugin, ``sync_claim``: finalizer changes and ``unsuitable_updates`` are
   appended at the claim's version (the answer records the list it answers,
   ``answeredPotentialNodes``: a list is answered once, also across restarts, and a write lost to
   a conflict is answered again by the next pass); ``StartAllocation`` / ``StartDeallocation`` start a saga on
   the foundation engine (saga id from the claim's version, so a repeated decision does not start
   a second one) in a background task, and the claim counts as busy until it ends;
4. a deleted claim without finalizers is removed (``ClassicResourceClaimDeleted``).

Writes bypass the apiserver's request API (which does not admit classic kinds yet) but use the
same lifecycle facts, so every reader's fold agrees; each changed claim is first checked with
``validate_classic(new, old)`` as the status verb would (an invalid one is logged, not appended;
in a saga step it is a definite failure, see :mod:`.saga_wiring`).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from collections.abc import Mapping

from msgspec.structs import replace

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import core_v1 as c1
from draflow.events.api.classic_pod import pod_claims
from draflow.events.envelope import Event
from draflow.events.objects import (
    deletion_requested,
    finalizers_changed,
    object_applied,
    object_deleted,
    status_updated,
)
from draflow.infra.eventstore import ConcurrencyError
from draflow.sagas.engine import SagaEngine, SagaStatus
from draflow.services.dra.classic import claims as cl
from draflow.services.dra.classic.plugin import ControllerPlugin
from draflow.services.dra.classic.podclaims import CreateClaim, pod_claim_refs, pods_waiting_for, sync_pod
from draflow.services.dra.classic.validation import admit_classic
from draflow.services.dra.resourceclaim import is_pod_terminal
from draflow.services.driver_controller import controller as ctl
from draflow.services.driver_controller.metrics import CLAIM_QUEUE, CREATE_FAILURES, CREATE_TOTAL
from draflow.services.driver_controller.saga_wiring import SAGAS, ClassicSagaDeps, plan_for, write_problems
from draflow.services.driver_controller.sagas import SagaInput, saga_id
from draflow.services.driver_controller.store import EventClaimStore
from draflow.services.runtime.controller import Runtime

__all__ = ["ACTOR", "KINDS", "DriverControllerService"]

log = logging.getLogger(__name__)

ACTOR = "driver-controller"
CLAIM = cv.CLAIM_KIND
# Driver-owned inventory kinds the plugins observe (the ACME driver's per-node capacity).
INVENTORY = ("Node", "NodeGpuCapacity")
KINDS = frozenset({CLAIM, cv.CLASS_KIND, "Pod", *INVENTORY})
_UID_NAMESPACE = uuid.UUID("6d1f2a52-3c1e-4b7a-9a43-2f0c6a1de301")


class DriverControllerService:
    def __init__(
        self,
        rt: Runtime,
        plugins: Mapping[str, ControllerPlugin],
        *,
        retry_attempts: int = 5,
        retry_initial_s: float = 0.05,
    ) -> None:
        self.rt = rt
        rt.kinds = KINDS
        self.plugins = dict(plugins)
        self.engine = SagaEngine(
            rt.events,
            SAGAS,
            deps=ClassicSagaDeps(self.plugins, EventClaimStore(rt.events)),
            retry_attempts=retry_attempts,
            retry_initial_s=retry_initial_s,
        )
        self.sagas: dict[tuple[str, str], asyncio.Task[SagaStatus]] = {}
        self.attempts: dict[str, int] = {}  # base saga id -> attempts that ended without success
        self._restored = False

    async def resume(self) -> None:
        """Finish sagas a previous instance left running (forward or backward).

        Call :meth:`prime` first: a resumed step asks the plugins, which must know the inventory
        and the claims already allocated, or they could hand out a device twice."""
        await self.engine.resume_pending()

    def prime(self) -> None:
        """Give the plugins their inventory and rebuild their books from the allocated claims."""
        rt = self.rt
        for kind in INVENTORY:
            for obj in rt.items(kind):
                for plugin in self.plugins.values():
                    plugin.observe(obj)
        if not self._restored:
            for claim in rt.items(CLAIM):
                if cl.phase(claim) != cv.PENDING:
                    for plugin in self.plugins.values():
                        plugin.observe(claim)
            self._restored = True

    def busy(self, namespace: str, name: str) -> bool:
        task = self.sagas.get((namespace, name))
        return task is not None and not task.done()

    async def wait_idle(self) -> None:
        running = [t for t in self.sagas.values() if not t.done()]
        if running:
            await asyncio.gather(*running, return_exceptions=True)

    async def sync(self) -> None:
        rt = self.rt
        self.prime()
        claims: list[cv.ResourceClaim] = rt.items(CLAIM)
        pods: list[c1.Pod] = [p for p in rt.items("Pod") if pod_claims(p) is not None]
        await self._pods(pods, claims)
        classes = {c.metadata.name: c for c in rt.items(cv.CLASS_KIND)}
        depth = 0
        for claim in rt.items(CLAIM):
            depth += await self._claim(claim, classes, pods)
        CLAIM_QUEUE.set(depth)

    async def _pods(self, pods: list[c1.Pod], claims: list[cv.ResourceClaim]) -> None:
        by_ns: dict[str, dict[str, cv.ResourceClaim]] = {}
        for c in claims:
            by_ns.setdefault(c.metadata.namespace, {})[c.metadata.name] = c
        for pod in pods:
            for action in sync_pod(pod, by_ns.get(pod.metadata.namespace, {})):
                if isinstance(action, CreateClaim):
                    await self._create(action.claim)
                else:
                    log.info("%s: pod %s: %s", ACTOR, pod.metadata.name, action)
        all_pods: list[c1.Pod] = self.rt.items("Pod")
        live = {p.metadata.uid for p in all_pods}
        running = {p.metadata.uid for p in all_pods if not is_pod_terminal(p)}
        for c in claims:
            owners = [r.uid for r in c.metadata.owner_references if r.kind == "Pod"]
            if owners and not any(u in live for u in owners) and not cl.is_deleting(c):
                await self._delete(c)
            # KEP: the claim controller removes Pods that no longer exist (or have finished) from
            # reservedFor, so deletion and userLimit are not blocked by them.
            stale = [u.uid for u in c.status.reserved_for if u.kind == "Pod" and u.uid not in running]
            if stale:
                new = c
                for uid in stale:
                    new = cl.unreserved(new, uid)
                await self._write(c, new)

    async def _create(self, claim: cv.ResourceClaim) -> None:
        meta = claim.metadata
        owner = meta.owner_references[0].uid if meta.owner_references else ""
        uid = str(uuid.uuid5(_UID_NAMESPACE, f"{meta.namespace}/{meta.name}/{owner}"))
        # the apiserver would stamp it; only display (AGE) reads it, no decision does
        created = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        CREATE_TOTAL.inc()
        try:
            stored = admit_classic(
                replace(claim, metadata=replace(meta, uid=uid, creation_timestamp=created)),
                namespace=meta.namespace,
            )
            await self.rt.cache.append(
                CLAIM, meta.namespace, meta.name, [object_applied(stored)], expected_last_seq=0
            )
        except ConcurrencyError:
            pass  # created meanwhile (another pass or instance): the next pass sees it
        except Exception as exc:
            CREATE_FAILURES.inc()
            log.warning("%s: cannot create claim %s/%s: %s", ACTOR, meta.namespace, meta.name, exc)

    async def _delete(self, claim: cv.ResourceClaim) -> None:
        meta = claim.metadata
        if meta.finalizers:
            # the shell may read the clock for a timestamp; no decision depends on it
            stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            await self.rt.append(CLAIM, meta.namespace, meta.name, [deletion_requested(CLAIM, stamp)])
        else:
            await self.rt.append(CLAIM, meta.namespace, meta.name, [object_deleted(CLAIM)])

    async def _claim(
        self, claim: cv.ResourceClaim, classes: Mapping[str, cv.ResourceClass], pods: list[c1.Pod]
    ) -> int:
        """One claim's decisions; returns 1 when the claim has work left (the queue depth)."""
        meta = claim.metadata
        key = (meta.namespace, meta.name)
        if cl.is_deleting(claim) and not meta.finalizers and not self.busy(*key):
            await self.rt.append(CLAIM, meta.namespace, meta.name, [object_deleted(CLAIM)])
            return 1
        pending = 0
        cls = classes.get(claim.spec.resource_class_name)
        for driver, plugin in self.plugins.items():
            actions = ctl.sync_claim(
                claim,
                cls,
                driver_name=driver,
                saga_running=self.busy(*key),
            )
            for action in actions:
                if not isinstance(action, ctl.Wait) or self.busy(*key):
                    pending = 1
                await self._act(claim, action, driver, plugin, classes, pods)
        return pending

    async def _act(
        self,
        claim: cv.ResourceClaim,
        action: ctl.Action,
        driver: str,
        plugin: ControllerPlugin,
        classes: Mapping[str, cv.ResourceClass],
        pods: list[c1.Pod],
    ) -> None:
        meta = claim.metadata
        if isinstance(action, ctl.AddFinalizer):
            await self._write(claim, cl.with_finalizer(claim, driver))
        elif isinstance(action, ctl.RemoveFinalizer):
            await self._write(claim, cl.without_finalizer(claim, driver))
        elif isinstance(action, ctl.UpdateUnsuitableNodes):
            waiting = pods_waiting_for(claim, pods)
            pod = waiting[0] if waiting else None
            group = [claim]
            if pod is not None:
                names = {r.claim_name for r in pod_claim_refs(pod)}
                group = [c for c in self.rt.items(CLAIM, meta.namespace) if c.metadata.name in names]
            for new in ctl.unsuitable_updates(plugin, pod, group, classes):
                old = self.rt.get(CLAIM, new.metadata.namespace, new.metadata.name)
                if old is not None:
                    await self._write(old, new)
        elif isinstance(action, ctl.StartAllocation | ctl.StartDeallocation):
            plan = plan_for(action)
            seq = int(meta.resource_version or 0)
            inp = SagaInput(
                namespace=meta.namespace,
                name=meta.name,
                uid=meta.uid,
                driver_name=driver,
                selected_node=action.selected_node if isinstance(action, ctl.StartAllocation) else None,
                reason=action.reason if isinstance(action, ctl.StartDeallocation) else "",
            )
            base = saga_id(plan.saga_type, claim, seq)
            sid = saga_id(plan.saga_type, claim, seq, self.attempts.get(base, 0))
            task = asyncio.create_task(self._run_saga(base, plan.saga_type, sid, inp))
            task.add_done_callback(self._saga_done)
            self.sagas[(meta.namespace, meta.name)] = task
        elif isinstance(action, ctl.Wait):
            log.debug("%s: %s/%s: %s", ACTOR, meta.namespace, meta.name, action.reason)

    async def _run_saga(self, base: str, saga_type: str, sid: str, inp: SagaInput) -> SagaStatus:
        state = await self.engine.start(saga_type, sid, inp)
        if state.status != SagaStatus.COMPLETED:
            # Ended without success: if the claim did not change, the next pass (on the runtime's
            # resync timer, not at once) starts the same work under a new attempt number.
            self.attempts[base] = self.attempts.get(base, 0) + 1
            log.info("%s: saga %s ended %s: %s", ACTOR, sid, state.status, state.error)
        return state.status

    def _saga_done(self, task: asyncio.Task[SagaStatus]) -> None:
        if task.cancelled():
            return
        if task.exception() is not None:
            log.warning("%s: saga failed to run: %r", ACTOR, task.exception())
        elif task.result() == SagaStatus.COMPLETED:
            self.rt.kick()  # the saga's writes enable the next decision

    async def _write(self, old: cv.ResourceClaim, new: cv.ResourceClaim) -> None:
        problems = write_problems(old, new)
        if problems:  # as the apiserver's status verb would refuse it: not appended
            meta = new.metadata
            ns, name = meta.namespace, meta.name
            log.error("%s: invalid write of claim %s/%s not appended: %s", ACTOR, ns, name, problems)
            return
        events: list[Event] = []
        if new.metadata.finalizers != old.metadata.finalizers:
            events.append(finalizers_changed(CLAIM, new.metadata.finalizers))
        if new.status != old.status:
            events.append(status_updated(CLAIM, new.status))
        if events:
            await self.rt.append(CLAIM, new.metadata.namespace, new.metadata.name, events)
