"""The Kubernetes API's speed: LIST of many pods (JSON and Table), WATCH delivery latency, and what
100 concurrent watchers cost the scheduler.

Real processes: a private nats-server, the control plane's ``python -m draflow.services.apiserver``
and, by default (``--kube-api-in replica``), an apiserver replica serving only the Kubernetes API
over HTTPS (``--kube-api ADDR --kube-api-only``) under ``nice -n 10`` (``--replica-nice``; 0: not
niced), the control plane's apiserver serving none (``DRAFLOW_KUBE_API=off``). That is the
Procfile's deployment: kubectl and watch load goes to a process of its own at a lower priority, so
it uses the CPU the control plane leaves idle instead of taking it from scheduling.
``--kube-api-in apiserver`` has the control plane's apiserver serve it (``DRAFLOW_KUBE_API``), as
earlier versions did. ``kube_api_in`` and ``replica_nice`` say which. The bench is the client
(aiohttp, TLS, the admin token).

* ``list_json_ms`` / ``list_table_ms``: ``GET /api/v1/pods`` of ``--pods`` pods (created through
  the control plane's API), whole body read, as JSON and as ``kubectl get``'s Table; median of
  ``--repeat`` requests after one warm-up (``*_cold_ms``: the first request, before the encoding
  cache holds the pods);
* ``watch_p50_ms`` / ``watch_p99_ms``: a watcher's receipt of an event minus the event's storage
  time in JetStream, over ``--watch-events`` status updates sent one at a time; with a replica,
  its following of the log is part of it, as it is for that deployment's clients;
* ``watchers_slowdown_pct`` / ``watchers_fill_slowdown_pct``: ``bench.scheduling`` (a small
  cluster) run without and with ``--watchers`` watchers of every pod (raw stream read, events
  counted, not decoded; in a process of their own, as kubectl or a controller would be:
  :mod:`bench.kubeapi_watchers`), steady-state and fill pods/s compared (positive: slower with
  watchers);
* ``watchers_niced_slowdown_pct`` / ``watchers_niced_fill_slowdown_pct``: the same with the
  watchers' process under ``nice -n 19`` (``--watchers-nice``; 0 skips the run). The watchers'
  client stands in for clients on other machines; here it shares the control plane's 2 cores,
  and its TLS, HTTP and 100 connections (``watchers*_client_cpu_ms_per_pod``) take more CPU per
  pod than the server spends sending to them. At the lowest priority it uses what the system
  leaves idle, so the niced run shows the system's own cost of serving the watchers. Nothing is
  hidden: the events they received, their CPU per pod, and the apiserver's and the replica's CPU
  per pod without, with, and with niced watchers (``apiserver_cpu_ms_per_pod*``,
  ``kubeapi_cpu_ms_per_pod*``) are all in the JSON line. ``--no-scheduling`` skips both.
* ``--rounds`` N (3): the scheduling runs alone / with watchers / with niced watchers, N times
  interleaved (one fill is a second or so, so one sample is mostly noise); every figure above
  is the median over the rounds, each round's own values in ``rounds``, one line per round.

``python -m bench.kubeapi [--pods 5000] [--watchers 100] [--rounds 3] [--kube-api-in replica]
[--replica-nice 10] [--json]``; ``--json`` prints one JSON
object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.harness import Services, pct, report, spawn_apiserver, stored_at
from bench.kubeapi_watchers import Client, Watchers, wait_kube
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.natsd import LocalNatsServer, free_port
from draflow.services.runtime.client import ApiClient

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i:05d}", "namespace": "bench", "labels": {"app": "bench", "i": str(i)}},
        "spec": {
            "containers": [
                {
                    "name": "ctr",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
        },
    }


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await fn()
    return (time.perf_counter() - t0) * 1000


async def list_and_watch(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="draflow-bench-kubeapi-"))
    server = LocalNatsServer(tmp / "nats")
    server.start()
    settings = Settings(nats_url=server.url, data_dir=tmp / "data", stream="BENCH", root="bench")
    settings.data_dir.mkdir(parents=True)
    port = free_port()
    services = Services(settings)
    api: ApiClient | None = None
    client: Client | None = None
    store: EventStore | None = None
    try:
        if args.kube_api_in == "replica":
            await spawn_apiserver(services, f"127.0.0.1:{port}", replica_nice=args.replica_nice)
        else:
            kube_api = f"127.0.0.1:{port}"
            await services.spawn("apiserver", "draflow.services.apiserver", DRAFLOW_KUBE_API=kube_api)
        await wait_kube(settings.data_dir)
        api = await ApiClient.connect(settings, actor="bench", timeout_s=120.0)
        client = Client(f"https://127.0.0.1:{port}", settings.data_dir)
        await api.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}])
        t0 = time.monotonic()
        for i in range(0, args.pods, 500):
            results = await api.apply([pod(j) for j in range(i, min(args.pods, i + 500))])
            assert all(r.error is None for r in results), [r.error for r in results if r.error][:1]
        print(f"setup: {args.pods} pods in {time.monotonic() - t0:.1f}s")
        body = await client.get("/api/v1/pods")  # a replica answers once it has followed the log here
        assert len(json.loads(body)["items"]) == args.pods
        out: dict[str, Any] = {"pods": args.pods, "list_bytes": len(body)}
        for name, accept in (("json", "application/json"), ("table", TABLE)):
            cold = await _timed(lambda a=accept: client.get("/api/v1/pods", a))  # type: ignore[misc]
            runs = [await _timed(lambda a=accept: client.get("/api/v1/pods", a)) for _ in range(args.repeat)]  # type: ignore[misc]
            out[f"list_{name}_ms"] = round(statistics.median(runs), 1)
            out[f"list_{name}_cold_ms"] = round(cold, 1)
            print(
                f"LIST {args.pods} pods as {name}: median {out[f'list_{name}_ms']} ms (first {cold:.1f} ms)"
            )

        # WATCH latency: receipt minus storage time of each event
        store = await EventStore.open(settings, "bench-reader")
        rv = json.loads(await client.get("/api/v1/namespaces/bench/pods?limit=1"))["metadata"][
            "resourceVersion"
        ]
        received: dict[int, float] = {}
        got = asyncio.Event()

        async def watch() -> None:
            assert client is not None
            path = f"/api/v1/namespaces/bench/pods?watch=1&resourceVersion={rv}"
            async with client.session.get(client.url + path, headers=client.headers, ssl=client.ssl) as resp:
                async for line in resp.content:
                    now = time.time()
                    ev = json.loads(line)
                    received[int(ev["object"]["metadata"]["resourceVersion"])] = now
                    got.set()

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0.5)
        for i in range(args.watch_events):
            got.clear()
            status = {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": str(i)}],
            }
            await api.update_status("Pod", f"pod-{i % args.pods:05d}", status, namespace="bench")
            await asyncio.wait_for(got.wait(), 10)
            await asyncio.sleep(0.005)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        out.update(await _delivery(store, list(received.items())))
        print(
            f"WATCH: {out['watch_events']} events, stored -> received p50 {out['watch_p50_ms']} ms, "
            f"p99 {out['watch_p99_ms']} ms"
        )
        return out
    finally:
        if client is not None:
            await client.close()
        if api is not None:
            await api.close()
        if store is not None:
            await store.close()
        await services.stop()
        server.stop()


RUN_FIGURES = (
    "steady",
    "fill",
    "apiserver_cpu_ms_per_pod",
    "kubeapi_cpu_ms_per_pod",
    "sched_cpu_ms_per_pod_total",
    "watchers_client_cpu_ms_per_pod",
    "watchers_events",
    "watchers_niceness",
    "watchers_watch_p50_ms",
    "watchers_watch_p99_ms",
    "kubeapi_niceness",
)


async def _scheduling_run(
    args: argparse.Namespace, sched_args: argparse.Namespace, watchers: int, nice: int
) -> dict[str, Any]:
    """One ``bench.scheduling`` run with ``watchers`` watchers (``nice``: their niceness); its
    figures by the names of ``RUN_FIGURES``."""
    from bench import scheduling

    port = free_port()
    address = f"127.0.0.1:{port}"
    replica = args.kube_api_in == "replica"
    if not replica:
        os.environ["DRAFLOW_KUBE_API"] = address  # the spawned apiserver serves it
    fleet = Watchers(watchers, port, nice)
    print(f"-- scheduling with {watchers} watchers" + (f" (nice -n {nice})" if nice else ""))

    async def done(store: EventStore) -> dict[str, Any]:  # while the system still runs
        await fleet.stop()
        return await _delivery(store, fleet.probe)

    try:
        r = await scheduling.run(
            sched_args,
            on_ready=fleet.start,
            kube_replica=address if replica else "",
            kube_replica_nice=args.replica_nice,
            on_done=done,
        )
    finally:
        await fleet.stop()
        os.environ.pop("DRAFLOW_KUBE_API", None)
    out = {
        "steady": r["steady_state_pods_per_s"],
        "fill": r["fill_pods_per_s"] or 0.0,
        "apiserver_cpu_ms_per_pod": r["cpu_ms_per_pod_run"].get("apiserver"),
        "kubeapi_cpu_ms_per_pod": r["cpu_ms_per_pod_run"].get("kubeapi"),
        "sched_cpu_ms_per_pod_total": r["cpu_ms_per_pod_total"],
        "kubeapi_niceness": r.get("kubeapi_niceness"),
    }
    if watchers:
        per_pod = fleet.cpu_s * 1000 / max(1, r.get("pods_created", 1))
        print(
            f"the watchers received {fleet.events} events until the apiserver stopped; their "
            f"process used {fleet.cpu_s:.1f} s CPU ({per_pod:.2f} ms per pod)"
        )
        out["watchers_client_cpu_ms_per_pod"] = round(per_pod, 2)
        out["watchers_events"] = fleet.events
        out["watchers_niceness"] = fleet.niceness  # as their process saw it
        out["watchers_watch_p50_ms"] = r.get("watch_p50_ms")
        out["watchers_watch_p99_ms"] = r.get("watch_p99_ms")
    return out


async def _delivery(store: EventStore, arrivals: list[tuple[int, float]]) -> dict[str, Any]:
    """How long after JetStream stored them watchers received changes: ``arrivals`` are
    (resourceVersion, time received); the log is read back once, over their range, for the
    storage times."""
    wanted = {rv for rv, _ in arrivals}
    if not wanted:
        return {}
    stored: dict[int, float] = {}
    async for records in store.read_raw(None, min(wanted), max(wanted)):
        for rec in records:
            if rec.seq in wanted:
                stored[rec.seq] = stored_at(rec)
    lat = [(t - stored[rv]) * 1000 for rv, t in arrivals if rv in stored]
    if not lat:
        return {}
    return {
        "watch_events": len(lat),
        "watch_p50_ms": round(pct(lat, 0.5), 2),
        "watch_p99_ms": round(pct(lat, 0.99), 2),
    }


def _median(runs: list[dict[str, Any]], figure: str) -> Any:
    """The median of one figure over the rounds (None when no round has it)."""
    values = [r[figure] for r in runs if r.get(figure) is not None]
    if not values:
        return None
    if all(isinstance(v, int) for v in values):  # a count or a niceness stays one
        return statistics.median_low(values)
    return round(statistics.median(values), 2)


def _slower(base: float, loaded: float) -> float:
    return round((base - loaded) / base * 100, 1) if base else 0.0


async def scheduling_with_watchers(args: argparse.Namespace) -> dict[str, Any]:
    """``--rounds`` rounds of alone / with watchers / with niced watchers, interleaved so that a
    change in the machine's load falls on every kind of run alike; figures are the medians over
    the rounds, each round's own in ``rounds``."""
    from bench import scheduling

    sched_args = scheduling.parse_args(
        [
            *("--nodes", str(args.sched_nodes), "--duration", str(args.sched_duration)),
            *("--levels", "empty,half", "--backlog-pods", str(args.sched_pods // 4)),
            *("--prefill", "pods"),
        ]
    )
    runs = [("alone", 0, 0), ("watchers", args.watchers, 0)]
    if args.watchers_nice:
        runs.append(("niced", args.watchers, args.watchers_nice))
    rounds: list[dict[str, dict[str, Any]]] = []
    for k in range(args.rounds):
        print(f"- round {k + 1} of {args.rounds}")
        this = {name: await _scheduling_run(args, sched_args, n, nice) for name, n, nice in runs}
        rounds.append(this)
        print(
            f"round {k + 1}: "
            + "; ".join(
                f"{name} steady {r['steady']} fill {r['fill']} pods/s, CPU ms per pod apiserver "
                f"{r['apiserver_cpu_ms_per_pod']}"
                + ("" if r["kubeapi_cpu_ms_per_pod"] is None else f" replica {r['kubeapi_cpu_ms_per_pod']}")
                for name, r in this.items()
            )
        )
    med = {name: {f: _median([r[name] for r in rounds], f) for f in RUN_FIGURES} for name, _, _ in runs}
    base, fill = med["alone"]["steady"], med["alone"]["fill"]
    out: dict[str, Any] = {
        "watchers": args.watchers,
        "sched_pods_per_s": base,
        "fill_pods_per_s": fill,
        "apiserver_cpu_ms_per_pod": med["alone"]["apiserver_cpu_ms_per_pod"],
        "kubeapi_cpu_ms_per_pod": med["alone"]["kubeapi_cpu_ms_per_pod"],
        "sched_cpu_ms_per_pod_total": med["alone"]["sched_cpu_ms_per_pod_total"],
        "replica_niceness": med["alone"]["kubeapi_niceness"],  # as the kernel held it
        "rounds": rounds,
    }
    for name, suffix in (("watchers", ""), ("niced", "_niced")):
        if name not in med:
            continue
        m = med[name]
        with_ = "with_niced_watchers" if suffix else "with_watchers"
        out[f"sched_pods_per_s_{with_}"] = m["steady"]
        out[f"watchers{suffix}_slowdown_pct"] = _slower(base, m["steady"])
        out[f"fill_pods_per_s_{with_}"] = m["fill"]
        out[f"watchers{suffix}_fill_slowdown_pct"] = _slower(fill, m["fill"])
        out[f"apiserver_cpu_ms_per_pod_{with_}"] = m["apiserver_cpu_ms_per_pod"]
        out[f"kubeapi_cpu_ms_per_pod_{with_}"] = m["kubeapi_cpu_ms_per_pod"]
        out[f"sched_cpu_ms_per_pod_total_{with_}"] = m["sched_cpu_ms_per_pod_total"]
        out[f"watchers{suffix}_client_cpu_ms_per_pod"] = m["watchers_client_cpu_ms_per_pod"]
        out[f"watchers{suffix}_events"] = m["watchers_events"]
        out[f"watchers{suffix}_niceness"] = m["watchers_niceness"]
        # a sampled watcher's delivery under that load (stored in JetStream -> received)
        out[f"watchers{suffix}_watch_p50_ms"] = m["watchers_watch_p50_ms"]
        out[f"watchers{suffix}_watch_p99_ms"] = m["watchers_watch_p99_ms"]
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    load = os.getloadavg()
    replica = args.kube_api_in == "replica"
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}",
        "loadavg_before": [round(x, 2) for x in load],
        "kube_api_in": args.kube_api_in,
        "replica_nice": args.replica_nice if replica else None,
    }
    result.update(await list_and_watch(args))
    if not args.no_scheduling:
        result.update(await scheduling_with_watchers(args))
        alone, loaded = result["sched_pods_per_s"], result["sched_pods_per_s_with_watchers"]
        where = f"a replica at nice {args.replica_nice}" if replica else "the apiserver"
        rounds = f"{args.rounds} rounds" if args.rounds > 1 else "1 round"
        print(
            f"scheduling (Kubernetes API on {where}; median of {rounds}): {alone} pods/s alone, "
            f"{loaded} with {args.watchers} watchers "
            f"({result['watchers_slowdown_pct']} % slower); fill {result['fill_pods_per_s']} -> "
            f"{result['fill_pods_per_s_with_watchers']} pods/s ({result['watchers_fill_slowdown_pct']} % "
            f"slower); apiserver CPU {result['apiserver_cpu_ms_per_pod']} -> "
            f"{result['apiserver_cpu_ms_per_pod_with_watchers']} ms per pod"
            + (
                f", the replica's {result['kubeapi_cpu_ms_per_pod']} -> "
                f"{result['kubeapi_cpu_ms_per_pod_with_watchers']}"
                if replica
                else ""
            )
        )
        if "sched_pods_per_s_with_niced_watchers" in result:
            print(
                f"scheduling with the watchers under nice -n {args.watchers_nice}: "
                f"{result['sched_pods_per_s_with_niced_watchers']} pods/s "
                f"({result['watchers_niced_slowdown_pct']} % slower); fill "
                f"{result['fill_pods_per_s_with_niced_watchers']} pods/s "
                f"({result['watchers_niced_fill_slowdown_pct']} % slower); apiserver CPU "
                f"{result['apiserver_cpu_ms_per_pod_with_niced_watchers']} ms per pod, the watchers' "
                f"{result['watchers_niced_client_cpu_ms_per_pod']} ms per pod"
            )
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.kubeapi", description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, default=5000)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--watch-events", type=int, default=200)
    p.add_argument("--watchers", type=int, default=100)
    p.add_argument(
        "--watchers-nice",
        type=int,
        default=19,
        help="a third run with the watchers at this niceness (0: none)",
    )
    p.add_argument("--sched-nodes", type=int, default=100)
    p.add_argument("--sched-pods", type=int, default=800)
    p.add_argument("--no-scheduling", action="store_true", help="skip the watchers-vs-scheduling run")
    p.add_argument("--sched-duration", type=float, default=5.0, help="each steady-state window, seconds")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the scheduling runs")
    p.add_argument(
        "--kube-api-in",
        choices=("replica", "apiserver"),
        default="replica",
        help="who serves the Kubernetes API: an apiserver replica of its own (the Procfile's "
        "layout) or the control plane's apiserver",
    )
    p.add_argument("--replica-nice", type=int, default=10, help="the replica's niceness (0: not niced)")
    # the flag of earlier versions, now the default
    p.add_argument(
        "--kube-api-replica",
        dest="kube_api_in",
        action="store_const",
        const="replica",
        help=argparse.SUPPRESS,
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if not 0 <= args.replica_nice <= 19:
        p.error("--replica-nice must be 0 to 19")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return report(run(args), as_json=args.json)


if __name__ == "__main__":
    raise SystemExit(main())
