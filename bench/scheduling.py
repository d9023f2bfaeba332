"""End-to-end DRA scheduling throughput, measured as scheduler_perf measures it.

Real processes on a real JetStream: a local nats-server, the apiserver, the claim controller
(generates each pod's ResourceClaim from its template; ``--claims bench`` has the bench create the
claims instead) and the scheduler, all running throughout. The bench creates a DeviceClass, a
ResourceClaimTemplate, ``--nodes`` Nodes and one ResourceSlice per node with
``--devices-per-node`` devices (published directly, as a driver would), then pods through the
apiserver, each with one claim from the template. The bench stands in for the kubelets and, like
scheduler_perf, does not run the bound pods. Every time is a storage time in the log.

Per occupancy level — *empty*, *half* and *full*: 0 %, 50 % and all devices but the in-flight
pods' (99.8 % at 500 x 10, upstream's 4,990 of 5,000) allocated before the level is measured:

* **steady state** (upstream's ``SteadyStateClusterResourceClaimTemplate``): ``--in-flight`` N pods
  (10) exist; once all N are bound they are deleted (grace 0) and N new ones created at once, as
  upstream's ``createPodsSteadily`` does (``--replace each``: each pod deleted and replaced as soon
  as it is bound), so pod creation, claim generation, scheduling, binding and the previous pods'
  deallocation overlap; for ``--duration`` seconds (10). pods/s = pods bound
  within the window / its length (upstream's SchedulingThroughput averages the same count over
  1 s samples); created → bound latency p50/p99 (``PodApplied`` → ``PodBound``) over those pods.
* **backlog** (empty and half only: full has no room for it): the scheduler is paused (SIGSTOP)
  while ``--backlog-pods`` B pods are created and get their claims, then continued: pods/s = B /
  (last ``PodBound`` - SIGCONT), the scheduler draining a ready queue alone. The B pods are then
  deleted and their claims deallocated before the next phase.

Occupancy (``--prefill``): ``pods`` creates pods as fast as the apiserver takes them (chunks of
``--create-chunk``) while everything runs, each scheduled through the normal path; that is the
**fill** figure (pods / (last ``PodBound`` - first ``PodApplied``)). ``claims`` allocates
standalone claims directly as upstream's ``allocResourceClaims`` does (see
:mod:`bench.scheduling_prefill` for exactly what it appends); ``auto`` (default) is ``pods`` up to
1,000 nodes, ``claims`` above.

Variants: ``--selector cel`` puts a CEL selector in the template's request (upstream's
``selector_*`` cases), ``--match-attribute`` asks for two devices with a ``matchAttribute``
constraint (``match_*``). ``--levels`` picks levels (``--nodes 5000 --levels empty,half`` is the
issue's large shape).

``--profile`` attaches py-spy (``pip install 'draflow[profile]'``) to each Python service for each
steady-state window and writes one flame graph per service and level (``<service>-<level>.svg``;
attaching needs the right to read the services' memory: same user without Yama's ptrace
restriction, or root); ``--profile run`` starts each service under py-spy instead (no such right
needed) and writes one flame graph of its whole run. Either way into the directory it prints.

Also reported: CPU ms per bound pod per process over the steady-state windows and their total
(the bench's own tracker not counted in it), events per bound pod (the pod's path in the log before
the bench deleted it: ``events_per_bound_pod``; everything the windows appended, deletions included:
``log_events_per_bound_pod``), a per-hop breakdown of created → bound (:mod:`bench.scheduling_hops`)
and the PodScheduling saga's duration.

``python -m bench.scheduling [--nodes 500] [--devices-per-node 10] [--in-flight 10] [--duration 10]
[--json]``; ``--json`` prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.harness import (
    Bus,
    Profiler,
    ProfilerMissing,
    Services,
    machine,
    pct,
    serving_api,
    spawn_apiserver,
)
from bench.scheduling_cluster import Tracker, cluster_manifests, devices_per_pod
from bench.scheduling_hops import events_to_deletion, hop_breakdown, path_to_bound, print_hops
from bench.scheduling_phases import Phases, scan_log
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.runtime.client import ApiClient

LEVELS = ("empty", "half", "full")


def _mode(args: argparse.Namespace) -> str:
    return "cel" if args.selector == "cel" else "match" if args.match_attribute else "plain"


async def run(
    args: argparse.Namespace,
    on_ready: Callable[[Settings], Awaitable[Any]] | None = None,
    *,
    kube_replica: str = "",
    kube_replica_nice: int = 0,
    on_done: Callable[[EventStore], Awaitable[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """``on_ready(settings)`` runs once the apiserver answers, before the cluster is set up
    (``bench.kubeapi`` connects its watchers there). ``kube_replica``: an address where an
    apiserver replica of its own serves the Kubernetes API (``--kube-api-only``; the control
    plane's apiserver then serves none), its CPU counted as ``kubeapi``, started under ``nice -n
    kube_replica_nice`` (the niceness it ran at: ``kubeapi_niceness``). ``on_done(store)`` runs
    after the measurements while every process still runs; what it returns joins the result."""
    mode = _mode(args)
    async with Bus("draflow-bench-") as bus:
        profile_dir = Path(args.profile_dir or bus.tmp / "profiles") if args.profile else None
        whole_run = profile_dir if args.profile == "run" else None
        services = Services(bus.settings, profile_dir=whole_run)
        profiler = Profiler(profile_dir) if args.profile == "windows" and profile_dir else None
        tracker = Tracker(bus.store)
        api: ApiClient | None = None
        try:
            await spawn_apiserver(services, kube_replica, replica_nice=kube_replica_nice)
            if args.claims == "controller":
                await services.spawn("claim_controller", "draflow.services.claim_controller")
            await services.spawn("scheduler", "draflow.services.scheduler")
            api = await serving_api(bus.settings)
            if on_ready is not None:
                await on_ready(bus.settings)
            tracker.start()
            per_pod = devices_per_pod(mode)
            phases = Phases(args, api, bus, services, tracker, mode)
            phases.profiler = profiler
            await phases.setup(cluster_manifests(args.nodes, args.devices_per_node, mode))
            total = args.nodes * args.devices_per_node
            targets = {"empty": 0, "half": total // 2, "full": total - args.in_flight * per_pod}
            for level in args.levels:
                await phases.occupy(targets[level])
                await phases.steady(level)
                if level != "full" and args.backlog_pods:
                    await phases.backlog(level)
            result = _result(args, mode, phases, tracker)
            result.update(await scan_log(bus.store, phases.windows))
            if kube_replica:
                result["kubeapi_niceness"] = services.niceness("kubeapi")
            if on_done is not None:
                result.update(await on_done(bus.store))
            print(
                f"whole run: {result['pods_bound_in_log']} pods bound in the log, "
                f"{result['guard_retries']} PreBind retries after a guard conflict, "
                f"{result['sagas_compensated']} sagas compensated"
            )
            if profile_dir is not None:
                result["profile_dir"] = str(profile_dir)
            return result
        finally:
            await tracker.stop()
            if api is not None:
                await api.close()
            await services.stop()
            if profile_dir is not None and profile_dir.exists():
                each = "window" if args.profile == "windows" else "run"
                print(f"flame graphs (py-spy, one per service and {each}): {profile_dir}")


def _result(args: argparse.Namespace, mode: str, p: Phases, tracker: Tracker) -> dict[str, Any]:
    result: dict[str, Any] = {
        **machine(),
        "nodes": args.nodes,
        "devices_per_node": args.devices_per_node,
        "mode": mode,
        "in_flight": args.in_flight,
        "duration_s": args.duration,
        "replace": args.replace,
        "prefill": p.prefill,
        "claims_created_by": "claim-controller" if args.claims == "controller" else "bench",
    }
    for level, rate in p.steady_rate.items():
        result[f"steady_{level}_pods_per_s"] = round(rate, 1)
        lat = p.steady_latency[level]
        result[f"steady_{level}_p50_ms"] = round(pct(lat, 0.5), 1) if lat else None
        result[f"steady_{level}_p99_ms"] = round(pct(lat, 0.99), 1) if lat else None
        result[f"steady_{level}_unschedulable"] = p.steady_failed.get(level, {})
    rates = list(p.steady_rate.values())
    result["steady_state_pods_per_s"] = round(statistics.fmean(rates), 1) if rates else 0.0
    lat_all = [v for vs in p.steady_latency.values() for v in vs]
    result["steady_state_p50_ms"] = round(pct(lat_all, 0.5), 1)
    result["steady_state_p99_ms"] = round(pct(lat_all, 0.99), 1)
    result["steady_state_pods"] = len(p.steady_pods)
    for level, rate in p.backlog_rate.items():
        result[f"backlog_{level}_pods_per_s"] = round(rate, 1)
    backlog = list(p.backlog_rate.values())
    result["backlog_pods_per_s"] = round(statistics.fmean(backlog), 1) if backlog else None
    result["fill_pods_per_s"] = round(p.fill_pods / p.fill_time, 1) if p.fill_time else None
    result["fill_pods"] = p.fill_pods
    result["prefill_claims_s"] = round(p.prefill_s, 1) if p.prefill == "claims" else None
    bound = max(1, len(p.steady_pods))
    cpu = {name: round(s * 1000 / bound, 2) for name, s in p.window_cpu.items()}
    result["cpu_ms_per_pod"] = cpu
    result["cpu_ms_per_pod_total"] = round(sum(v for k, v in cpu.items() if k != "bench"), 2)
    # the whole run (set-up, fill, backlog included) per pod created, as earlier versions reported
    result["pods_created"] = p.next_pod
    result["cpu_ms_per_pod_run"] = {k: round(s * 1000 / max(1, p.next_pod), 2) for k, s in p.cpu().items()}
    uids = [tracker.uid_of[n] for n in p.steady_pods]
    paths = [path for u in uids if (path := path_to_bound(tracker.marks.get(u, [])))]
    counts = events_to_deletion(
        tracker.marks, {tracker.uid_of[n]: t for n, t in p.deleted_at.items() if n in p.steady_pods}
    )
    result["events_per_bound_pod"] = round(statistics.fmean(counts), 2) if counts else None
    result["events_to_bound_per_pod"] = round(statistics.fmean(len(x) for x in paths), 2) if paths else None
    result["log_events_per_bound_pod"] = round(p.window_events / bound, 2)
    result["hops"] = hop_breakdown(paths)
    saga_ms = [t * 1000 for t in tracker.saga_took]
    result["saga_p50_ms"] = round(pct(saga_ms, 0.5), 1)
    result["saga_p99_ms"] = round(pct(saga_ms, 0.99), 1)
    _print(result)
    return result


def _print(r: dict[str, Any]) -> None:
    levels = ", ".join(
        f"{lv} {r[f'steady_{lv}_pods_per_s']}" for lv in LEVELS if f"steady_{lv}_pods_per_s" in r
    )
    print(
        f"steady state ({r['in_flight']} in flight, {r['duration_s']}s per level): "
        f"{r['steady_state_pods_per_s']} pods/s (mean; {levels}); created -> bound "
        f"p50 {r['steady_state_p50_ms']} ms, p99 {r['steady_state_p99_ms']} ms "
        f"over {r['steady_state_pods']} pods"
    )
    print(
        f"backlog: {r['backlog_pods_per_s']} pods/s; "
        f"fill: {r['fill_pods_per_s']} pods/s ({r['fill_pods']} pods)"
    )
    cpu = ", ".join(f"{k} {v}" for k, v in r["cpu_ms_per_pod"].items())
    print(
        f"CPU ms per bound pod (steady state): {cpu}; total (without the bench) {r['cpu_ms_per_pod_total']}"
    )
    print(
        f"events per bound pod: {r['events_per_bound_pod']} on its path before deletion "
        f"({r['events_to_bound_per_pod']} up to PodBound), {r['log_events_per_bound_pod']} appended "
        f"per bound pod in the windows (deletions included)"
    )
    for lv in LEVELS:
        if r.get(f"steady_{lv}_unschedulable"):
            print(f"failed attempts of the measured pods ({lv}): {r[f'steady_{lv}_unschedulable']}")
    print(f"PodScheduling saga duration: p50 {r['saga_p50_ms']} ms, p99 {r['saga_p99_ms']} ms")
    print_hops(r["hops"])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked (``bench.kubeapi`` builds its scheduling run's with this too)."""
    p = argparse.ArgumentParser(prog="python -m bench.scheduling", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--devices-per-node", type=int, default=10)
    p.add_argument("--in-flight", type=int, default=10, help="steady state: pods in existence")
    p.add_argument("--duration", type=float, default=10.0, help="steady state: seconds per level")
    p.add_argument(
        "--replace",
        choices=("batch", "each"),
        default="batch",
        help="steady state: replace the pods once all are bound (upstream) or each once bound",
    )
    p.add_argument("--levels", default="empty,half,full", help="occupancy levels to measure, in order")
    p.add_argument("--backlog-pods", type=int, default=500, help="backlog: pods per measurement (0: none)")
    p.add_argument("--prefill", choices=("auto", "pods", "claims"), default="auto")
    p.add_argument("--create-chunk", type=int, default=250, help="pods per apply request while filling")
    p.add_argument(
        "--claims",
        choices=("controller", "bench"),
        default="controller",
        help="who creates (and, after pod deletion, releases and deletes) the pods' claims",
    )
    p.add_argument("--selector", choices=("none", "cel"), default="none", help="a CEL selector per request")
    p.add_argument("--match-attribute", action="store_true", help="two devices with a matchAttribute")
    p.add_argument(
        "--profile",
        nargs="?",
        const="windows",
        choices=("windows", "run"),
        help="flame graphs of each service (py-spy): of each steady-state window (default) or of the run",
    )
    p.add_argument("--profile-dir", default="", help="where --profile writes (default: the run's folder)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    args.levels = [lv.strip() for lv in args.levels.split(",") if lv.strip()]
    if not args.levels or any(lv not in LEVELS for lv in args.levels):
        p.error(f"--levels: a comma-separated list of {', '.join(LEVELS)}")
    if args.selector == "cel" and args.match_attribute:
        p.error("--selector cel and --match-attribute are separate modes")
    if args.prefill == "auto":
        args.prefill = "pods" if args.nodes <= 1000 else "claims"
    total = args.nodes * args.devices_per_node
    per_pod = devices_per_pod(_mode(args))
    if args.in_flight < 1 or args.in_flight * per_pod > total:
        p.error("--in-flight: between 1 and the devices the pods can take")
    if args.backlog_pods * per_pod > total - total // 2:
        p.error("--backlog-pods: more than half the devices")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = asyncio.run(run(args))
    except ProfilerMissing as exc:
        print(f"bench.scheduling: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
