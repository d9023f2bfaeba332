"""A small in-memory cluster that runs the classic deciders end to end, without I/O.

It plays the roles the services will play: the apiserver (admission, versioned claims with
optimistic concurrency), the classic claim controller (``sync_pod``), the scheduler (the pure
plugin functions, one node-fit rule: ``spec.nodeSelector``), the driver controller (``sync_claim``
and the saga plans, run step by step with retries and reverse compensation like the foundation's
engine) with the real example driver plugins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec.structs import replace

from events.api import classic_v1alpha1 as cv
from events.api import core_v1 as c1
from events.api.classic_pod import decode_manifest
from events.api.meta import ObjectMeta
from sagas.engine import SagaDefinition
from services.dra.classic import claims as cl
from services.dra.classic.plugin import ControllerPlugin
from services.dra.classic.podclaims import (
    CreateClaim,
    DeleteClaim,
    pod_claim_refs,
    pods_waiting_for,
    sync_pod,
)
from services.dra.classic.validation import admit_classic, validate_classic
from services.driver_controller import controller as ctl
from services.driver_controller.saga_wiring import ClaimStep, plan_for
from services.driver_controller.sagas import (
    DRIVER_ALLOCATE,
    RECORD_FAILURE,
    Done,
    Fail,
    Retry,
    SagaInput,
    run_action,
)
from services.scheduler.plugins.classic import scheduling as sch


def _action(fn: object) -> str:
    """The action a classic saga step or compensation runs."""
    assert isinstance(fn, ClaimStep), fn
    return fn.action


class Conflict(Exception):
    pass


def node(name: str, **labels: str) -> c1.Node:
    return c1.Node(metadata=ObjectMeta(name=name, uid=f"uid-{name}", labels=labels))


class Cluster:
    def __init__(
        self, plugins: Mapping[str, ControllerPlugin], nodes: list[c1.Node], retries: int = 5
    ) -> None:
        self.plugins = dict(plugins)
        self.nodes = {n.metadata.name: n for n in nodes}
        self.classes: dict[str, cv.ResourceClass] = {}
        self.claims: dict[str, cv.ResourceClaim] = {}
        self.versions: dict[str, int] = {}
        self.pods: dict[str, c1.Pod] = {}
        self.bound: dict[str, str] = {}
        self.answered: dict[str, tuple[str, ...]] = {}
        self.retries = retries
        self.log: list[str] = []
        for n in nodes:
            for p in self.plugins.values():
                p.observe(n)

    # -- apiserver ----------------------------------------------------------------------------
    def apply(self, manifest: dict[str, Any]) -> Any:
        obj = decode_manifest(manifest)
        if isinstance(obj, cv.ResourceClass):
            self.classes[obj.metadata.name] = admit_classic(obj)
        elif isinstance(obj, cv.ResourceClaim):
            self.create_claim(obj)
        elif isinstance(obj, c1.Pod):
            meta = replace(obj.metadata, namespace="default", uid=f"uid-{obj.metadata.name}")
            obj = replace(obj, metadata=meta)
            self.pods[obj.metadata.name] = obj
        return obj

    def create_claim(self, claim: cv.ResourceClaim) -> None:
        meta = replace(claim.metadata, uid=claim.metadata.uid or f"uid-{claim.metadata.name}")
        stored = admit_classic(replace(claim, metadata=meta))
        self.claims[meta.name] = stored
        self.versions[meta.name] = 1

    def write(self, new: cv.ResourceClaim, based_on: int | None = None) -> None:
        name = new.metadata.name
        if based_on is not None and based_on != self.versions[name]:
            raise Conflict(name)
        old = self.claims[name]
        errors = validate_classic(new, old)
        assert not errors, [str(e) for e in errors]
        if new.metadata.deletion_timestamp and not new.metadata.finalizers:
            del self.claims[name]
            self.log.append(f"{name}: deleted")
            return
        self.claims[name] = new
        self.versions[name] += 1

    def delete_claim(self, name: str) -> None:
        claim = self.claims[name]
        meta = replace(claim.metadata, deletion_timestamp="2026-01-01T00:00:00Z")
        self.write(replace(claim, metadata=meta))

    # -- claim controller ---------------------------------------------------------------------
    def claim_controller(self) -> None:
        for pod in list(self.pods.values()):
            for action in sync_pod(pod, self.claims):
                if isinstance(action, CreateClaim):
                    self.create_claim(action.claim)
                elif isinstance(action, DeleteClaim):
                    self.delete_claim(action.claim_name)

    # -- driver controller --------------------------------------------------------------------
    def driver_controller(self) -> None:
        for name in sorted(self.claims):
            claim = self.claims.get(name)
            if claim is None:
                continue
            if cl.phase(claim) != cv.PENDING:
                self.answered.pop(name, None)
            cls = self.classes.get(claim.spec.resource_class_name)
            for driver, plugin in self.plugins.items():
                acts = ctl.sync_claim(
                    claim, cls, driver_name=driver, answered_potential_nodes=self.answered.get(name)
                )
                for act in acts:
                    self._act(name, act, cls, plugin, driver)

    def _act(
        self, name: str, act: ctl.Action, cls: cv.ResourceClass | None, plugin: ControllerPlugin, driver: str
    ) -> None:
        claim = self.claims[name]
        if isinstance(act, ctl.AddFinalizer):
            self.write(cl.with_finalizer(claim, driver))
        elif isinstance(act, ctl.RemoveFinalizer):
            self.write(cl.without_finalizer(claim, driver))
        elif isinstance(act, ctl.UpdateUnsuitableNodes):
            waiting = [
                p for p in pods_waiting_for(claim, self.pods.values()) if p.metadata.name not in self.bound
            ]
            pod = waiting[0] if waiting else None
            group = [claim]
            if pod is not None:
                group = [
                    self.claims[r.claim_name] for r in pod_claim_refs(pod) if r.claim_name in self.claims
                ]
            for upd in ctl.unsuitable_updates(plugin, pod, group, self.classes):
                self.write(upd)
            for c in group:
                self.answered[c.metadata.name] = cl.scheduling(c).scheduler.potential_nodes
        elif isinstance(act, ctl.StartAllocation | ctl.StartDeallocation):
            inp = SagaInput(
                namespace="default",
                name=name,
                uid=claim.metadata.uid,
                driver_name=driver,
                selected_node=act.selected_node if isinstance(act, ctl.StartAllocation) else None,
            )
            self.run_saga(plan_for(act), inp, plugin)

    def run_saga(self, plan: SagaDefinition, inp: SagaInput, plugin: ControllerPlugin) -> bool:
        """The saga's steps without the engine: forward with bounded retries; on failure
        compensate started steps in reverse."""
        started: list[int] = []
        for i, step in enumerate(plan.steps):
            started.append(i)
            out = None
            for _ in range(self.retries):
                claim = self.claims.get(inp.name)
                cls = self.classes.get(claim.spec.resource_class_name) if claim else None
                out = run_action(_action(step.action), claim, cls, plugin, inp)
                if not isinstance(out, Retry):
                    break
                self.log.append(f"{inp.name}: {step.name}: retry: {out.reason}")
            if isinstance(out, Done):
                if out.claim is not None:
                    self.write(out.claim)
                continue
            fail = out if isinstance(out, Fail) else Fail(reason=f"gave up: {out}")
            self.log.append(f"{inp.name}: {plan.saga_type} failed at {step.name}: {fail.reason}")
            claim = self.claims.get(inp.name)
            if fail.definite and _action(step.action) == DRIVER_ALLOCATE and claim is not None:
                rec = run_action(RECORD_FAILURE, claim, None, plugin, inp, failure=fail)
                if isinstance(rec, Done) and rec.claim is not None:
                    self.write(rec.claim)
            for j in reversed(started):
                comp = plan.steps[j].compensate
                if comp is None:
                    continue
                claim = self.claims.get(inp.name)
                res = run_action(_action(comp), claim, None, plugin, inp)
                if isinstance(res, Done) and res.claim is not None:
                    self.write(res.claim)
            return False
        self.log.append(f"{inp.name}: {plan.saga_type} done")
        return True

    # -- scheduler ----------------------------------------------------------------------------
    def _fits(self, pod: c1.Pod, n: c1.Node) -> bool:
        return all(n.metadata.labels.get(k) == v for k, v in pod.spec.node_selector.items())

    def schedule(self, pod_name: str, *, wait_for_driver: bool = False) -> str:
        pod = self.pods[pod_name]
        if pod_name in self.bound:
            return "bound"
        state = sch.pre_filter(pod, self.claims)
        if state.code == sch.UNSCHEDULABLE:
            return f"unschedulable: {state.reason}"
        results = {}
        for name in sorted(self.nodes):
            n = self.nodes[name]
            results[name] = sch.filter_node(state, n) if self._fits(pod, n) else sch.FilterResult(ok=False)
        feasible = [n for n, r in results.items() if r.ok]
        if not feasible:
            post = sch.post_filter(state, results.values())
            if post.reallocate is not None:
                self.write(post.reallocate)
                return f"unschedulable: {post.reason}"
            return f"unschedulable: no node ({post.reason})"
        for upd in sch.pre_score(state, feasible):
            self.write(upd)
        if wait_for_driver:
            self.driver_controller()
            state = sch.pre_filter(pod, self.claims)
            feasible = [n for n in feasible if sch.filter_node(state, self.nodes[n]).ok]
            if not feasible:
                return "unschedulable: no node after the driver's answer"
        chosen = feasible[0]
        res = sch.reserve(state, pod, chosen)
        for upd in res.updates:
            self.write(upd)
        if res.code == sch.RESERVED:
            self.bound[pod_name] = chosen
            return f"bound to {chosen}"
        return f"{res.code.lower()}: {res.reason}"

    def converge(self, pod_name: str, rounds: int = 12, **kw: Any) -> str:
        result = ""
        for _ in range(rounds):
            self.claim_controller()
            result = self.schedule(pod_name, **kw)
            self.log.append(f"schedule {pod_name}: {result}")
            if pod_name in self.bound:
                return result
            self.driver_controller()
        return result
