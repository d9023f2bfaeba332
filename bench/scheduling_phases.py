"""The phases of ``bench.scheduling`` (see its docstring): set-up, occupancy (fill or pre-fill),
steady state and backlog, and the pods the bench creates and deletes for them."""

from __future__ import annotations

import argparse
import os
import re
import signal
import time
from typing import Any

from bench.harness import Bus, Profiler, Services, cpu_s, stored_at
from bench.scheduling_cluster import NS, Tracker, apply_all, claim_manifest, devices_per_pod, pod_manifest
from bench.scheduling_prefill import prefill_claims
from draflow.events.api.core_v1 import PodResourceClaimStatus
from draflow.events.dra import ClaimDeallocated, PodClaimStatusesRecorded
from draflow.infra.eventstore import AppendRequest, EventStore
from draflow.services.runtime.client import ApiClient

__all__ = ["Phases", "scan_log", "unschedulable_reasons"]


def unschedulable_reasons(tracker: Tracker, pods: list[str]) -> dict[str, int]:
    """How often these pods' attempts failed, by reason (the message without its node counts:
    ``0/500 nodes are available: 500 cannot allocate all claims.`` -> ``cannot allocate all
    claims``), most frequent first: which extra cycles a pod's path took and why."""
    counts: dict[str, int] = {}
    for pod in pods:
        for message in tracker.unschedulable.get(tracker.uid_of.get(pod, ""), ()):
            reason = message.split(": ", 1)[-1].rstrip(".")
            reason = ", ".join(r.lstrip("0123456789 ") for r in reason.split(", "))
            counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


class Phases:
    def __init__(
        self,
        args: argparse.Namespace,
        api: ApiClient,
        bus: Bus,
        services: Services,
        tracker: Tracker,
        mode: str,
    ) -> None:
        self.args, self.api, self.bus, self.services, self.tracker = args, api, bus, services, tracker
        self.store = bus.store
        self.mode = mode  # the template's variant (plain, cel, match)
        self.per_pod = devices_per_pod(mode)  # devices one pod takes
        self.prefill: str = args.prefill
        self.next_pod = 0
        self.fill_live: list[str] = []  # pods that hold the occupancy (prefill "pods")
        self.occupied = 0  # devices allocated for the occupancy level
        self.steady_rate: dict[str, float] = {}
        self.steady_latency: dict[str, list[float]] = {}
        self.steady_pods: set[str] = set()
        # level -> the measured pods' failed attempts, by the message's first clause
        self.steady_failed: dict[str, dict[str, int]] = {}
        self.backlog_rate: dict[str, float] = {}
        self.fill_pods = 0
        self.fill_time = 0.0
        self.prefill_s = 0.0
        self.deleted_at: dict[str, float] = {}  # pod name -> when the bench asked to delete it
        self.window_cpu: dict[str, float] = {}  # process -> CPU seconds in the steady windows
        self.window_events = 0
        self.windows: list[tuple[float, float]] = []  # the steady-state windows (epoch seconds)
        self.profiler: Profiler | None = None  # --profile windows

    # -- pods ----------------------------------------------------------------------------------------

    async def create(self, n: int) -> list[str]:
        names = [f"pod-{self.next_pod + i:05d}" for i in range(n)]
        self.next_pod += n
        await apply_all(self.api, [pod_manifest(p) for p in names])
        if self.args.claims == "bench":
            await self._create_claims(names)
        return names

    async def _create_claims(self, names: list[str]) -> None:
        """What the claim controller does for each new pod: its claim from the template (owned by
        the pod) and ``status.resourceClaimStatuses``."""
        tracker = self.tracker
        await tracker.until(lambda: all(p in tracker.uid_of for p in names), 120, "pods in the log")
        await apply_all(self.api, [claim_manifest(p, tracker.uid_of[p], self.mode) for p in names])
        reqs = [
            AppendRequest(
                self.store.subject("Pod", NS, p),
                [
                    PodClaimStatusesRecorded(
                        statuses=(PodResourceClaimStatus(name="gpu", resource_claim_name=f"{p}-gpu"),)
                    )
                ],
                None,
            )
            for p in names
        ]
        await self.store.append_many(reqs)

    async def delete(self, names: list[str]) -> None:
        now = time.time()
        for p in names:
            self.deleted_at[p] = now
        await self.api.delete([("Pod", NS, p) for p in names], grace_period_seconds=0)
        if self.args.claims == "bench":  # release, deallocate, delete, as the claim controller does
            reqs = [
                AppendRequest(
                    self.store.subject("ResourceClaim", NS, f"{p}-gpu"),
                    [ClaimDeallocated(reason="PodDeleted", released=(self.tracker.uid_of[p],))],
                    None,
                )
                for p in names
            ]
            await self.store.append_many(reqs)
            await self.api.delete([("ResourceClaim", NS, f"{p}-gpu") for p in names])

    async def _deleted_and_freed(self, names: list[str]) -> None:
        """Delete bound pods and wait until their claims are deallocated."""
        await self.delete(names)
        tracker = self.tracker
        await tracker.until(
            lambda: all(tracker.uid_of[p] in tracker.deallocated for p in names), 300, "deallocations"
        )

    # -- phases --------------------------------------------------------------------------------------

    async def setup(self, manifests: list[dict[str, Any]]) -> None:
        t0 = time.monotonic()
        for i in range(0, len(manifests), 2000):
            await apply_all(self.api, manifests[i : i + 2000])
        print(
            f"setup: {self.args.nodes} nodes x {self.args.devices_per_node} devices in "
            f"{time.monotonic() - t0:.1f}s; claims created by the {self.args.claims}; "
            f"occupancy by {self.prefill}"
        )

    async def occupy(self, target: int) -> None:
        """Allocate devices up to ``target`` (never fewer than now: levels only go up)."""
        if target <= self.occupied:
            return
        if self.prefill == "claims":
            took = await prefill_claims(
                self.api, self.store, self.occupied, target, self.args.devices_per_node
            )
            self.prefill_s += took
            print(f"pre-fill: {target - self.occupied} claims allocated in {took:.1f}s")
            self.occupied = target
            return
        n = (target - self.occupied) // self.per_pod
        names: list[str] = []
        for i in range(0, n, self.args.create_chunk):
            names += await self.create(min(self.args.create_chunk, n - i))
        tracker = self.tracker
        await tracker.until(lambda: all(p in tracker.bound for p in names), 1800, "fill")
        first = min(tracker.created[tracker.uid_of[p]] for p in names)
        last = max(tracker.bound[p] for p in names)
        self.fill_pods += n
        self.fill_time += last - first
        self.fill_live += names
        self.occupied += n * self.per_pod
        rate = n / max(last - first, 1e-6)
        print(f"fill to {self.occupied} devices: {n} pods in {last - first:.2f}s = {rate:.1f} pods/s")

    def cpu(self) -> dict[str, float]:
        out = self.services.cpu()
        if self.bus.nats_pid is not None:
            out["nats-server"] = cpu_s(self.bus.nats_pid)
        out["bench"] = cpu_s(os.getpid())
        return out

    async def _last_seq(self) -> int:
        return int((await self.store.js.stream_info(self.store.stream)).state.last_seq)

    async def steady(self, level: str) -> None:
        """upstream's createPodsSteadily: N pods; all bound → all deleted, N new (``--replace
        batch``; ``each``: every bound pod deleted and replaced at once); for the duration."""
        n, tracker = self.args.in_flight, self.tracker
        each = self.args.replace == "each"
        await self._warm_up(level)
        recording = []
        if self.profiler is not None:
            pids = {name: self.services.pid(name) for name in self.services.procs}
            recording = await self.profiler.start(pids, self.args.duration, level)
        cpu0, seq0 = self.cpu(), await self._last_seq()
        start = time.time()
        end = start + self.args.duration
        batch = await self.create(n)
        wait_for = any if each else all
        while True:
            await tracker.until(
                lambda b=batch: time.time() >= end or wait_for(p in tracker.bound for p in b),
                self.args.duration + 300,
                f"steady state ({level})",
            )
            if time.time() >= end:
                break
            done = [p for p in batch if p in tracker.bound]
            await self.delete(done)
            batch = [p for p in batch if p not in done] + await self.create(len(done))
        cpu1, seq1 = self.cpu(), await self._last_seq()
        await Profiler.finish(recording)
        for name, s in cpu1.items():
            self.window_cpu[name] = self.window_cpu.get(name, 0.0) + s - cpu0.get(name, 0.0)
        self.window_events += seq1 - seq0
        self.windows.append((start, end))
        measured = [p for p, t in tracker.bound.items() if start <= t < end and p not in self.fill_live]
        measured = [p for p in measured if p not in self.steady_pods]
        self.steady_pods.update(measured)
        self.steady_failed[level] = unschedulable_reasons(tracker, measured)
        self.steady_rate[level] = len(measured) / self.args.duration
        self.steady_latency[level] = [
            (tracker.bound[p] - tracker.created[tracker.uid_of[p]]) * 1000 for p in measured
        ]
        lat = sorted(self.steady_latency[level])
        p50 = f"{lat[len(lat) // 2]:.0f}" if lat else "-"
        print(
            f"steady state ({level}, {self.occupied} devices allocated): {len(measured)} pods bound in "
            f"{self.args.duration:.0f}s = {self.steady_rate[level]:.1f} pods/s; created -> bound p50 {p50} ms"
        )
        # leave the level as it was: the last batch bound, deleted, its devices free again
        await tracker.until(lambda: all(p in tracker.bound for p in batch), 300, f"steady {level} last batch")
        await self._deleted_and_freed(batch)

    async def _warm_up(self, level: str) -> None:
        """One pod scheduled, deleted and freed before a window opens: the services have folded
        what set-up and occupancy wrote (at 5,000 nodes that takes seconds), so the window
        measures scheduling, not catching up. Not counted."""
        t0 = time.monotonic()
        (name,) = await self.create(1)
        await self.tracker.until(lambda: name in self.tracker.bound, 900, f"warm-up pod ({level})")
        await self._deleted_and_freed([name])
        print(f"warm-up ({level}): one pod scheduled and freed in {time.monotonic() - t0:.1f}s")

    async def backlog(self, level: str) -> None:
        """The scheduler paused while B pods are created and get claims, then drains them."""
        b, tracker = self.args.backlog_pods, self.tracker
        self.services.signal("scheduler", signal.SIGSTOP)
        try:
            names = await self.create(b)
            await tracker.until(lambda: all(p in tracker.statuses for p in names), 300, "claims")
        finally:
            self.services.signal("scheduler", signal.SIGCONT)
        start = time.time()
        await tracker.until(lambda: all(p in tracker.bound for p in names), 600, f"backlog {level}")
        took = max(tracker.bound[p] for p in names) - start
        self.backlog_rate[level] = b / max(took, 1e-6)
        print(f"backlog ({level}): {b} pods in {took:.2f}s = {self.backlog_rate[level]:.1f} pods/s")
        await self._deleted_and_freed(names)


def _retried(msg_id: str) -> bool:
    """Whether a saga's guard take is a retry: ``...:<attempt>#g<i>`` in the claim's batch (logs
    before), ``...:g<i>:<attempt>`` as PreBind's own append (attempt 0 has none)."""
    if not msg_id.startswith("saga:"):
        return False
    if "#g" in msg_id:
        return not msg_id.split("#g")[0].endswith(":0")
    return re.search(r":g\d+:\d+$", msg_id) is not None


async def scan_log(store: EventStore, windows: list[tuple[float, float]]) -> dict[str, float]:
    """The whole log read again at the end, apart from the tracker: pods bound (all, and within
    the steady-state windows: a recount of what the tracker measured), guard messages per bound
    pod, PreBind's guard takes retried after a conflict (an attempt > 0 in the take's message id),
    sagas compensated."""
    guards = retried = compensated = bound = in_windows = 0
    pod_prefix = f"{store.root}.ev.Pod.{NS}."
    async for records in store.read_raw(None, 1):
        for r in records:
            subject = r.subject
            if subject.startswith(pod_prefix) and r.header("Draflow-Type") == "PodBound":
                bound += 1
                ts = stored_at(r)
                in_windows += any(start <= ts < end for start, end in windows)
            elif ".ev.Guard." in subject:
                guards += 1
                retried += r.header("Draflow-Type") == "GuardTaken" and _retried(
                    r.header("Nats-Msg-Id") or ""
                )
            elif r.header("Draflow-Type") == "SagaCompensated":
                compensated += 1
    return {
        "pods_bound_in_log": bound,
        "steady_pods_bound_in_log": in_windows,
        "guard_events_per_bound_pod": round(guards / max(bound, 1), 2),
        "guard_retries": retried,
        "sagas_compensated": compensated,
    }
