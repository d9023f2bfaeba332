"""What one watch event costs the apiserver per watcher: CPU per delivered event, measured alone.

The apiserver (``ApiServer`` and its Kubernetes API, TLS, in this process) serves ``--watchers``
watchers of every pod, which run in a process of their own (``bench.kubeapi``'s fleet); this
process then writes ``--updates`` pod status updates one at a time through the apiserver's handler
(``--pace`` seconds apart: 0 is as fast as the writes go, each released to the watchers before the
next), then a burst of 200 pods in one request. The same is run without watchers; the difference
of this process's CPU time, divided by the events the watchers received, is the fan-out's cost per
delivered event (``us_per_delivery``); ``wakeups``, ``direct_writes`` and ``lines_built`` are
the watch cache's own counts over the same span (writes per wake-up: the watchers written without
their task; lines: event lines encoded, once per change and format however many watchers).

``python -m bench.watch_fanout [--watchers 100] [--updates 500] [--pace 0.003] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time
from typing import Any

import msgspec

from bench.harness import Bus, report
from bench.kubeapi_watchers import Watchers
from draflow.services.apiserver.kubeapi.auth import load_or_create, write_kubeconfig
from draflow.services.apiserver.kubeapi.server import KubeApi
from draflow.services.apiserver.server import ApiServer


def _pods(prefix: str, n: int) -> list[dict[str, Any]]:
    return [
        {
            "manifest": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{prefix}{i}", "namespace": "b"},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            }
        }
        for i in range(n)
    ]


async def _call(api: ApiServer, verb: str, req: dict[str, Any]) -> None:
    reply = await api.handle(verb, msgspec.json.encode(req))
    assert reply.error is None, reply.error


async def measure(watchers: int, updates: int, pace: float) -> tuple[float, int, dict[str, int]]:
    """(CPU seconds this process spent on the updates and their delivery, events delivered, the
    watch cache's counts: wake-ups, direct writes, lines built)."""
    async with Bus("draflow-bench-fanout-", stream="FANOUT", root="fanout", actor="apiserver") as bus:
        settings, events = bus.settings, bus.store
        api = ApiServer(events)
        await api.start()
        creds = load_or_create(settings.data_dir / "kubeapi", "127.0.0.1")
        kube = KubeApi(api, host="127.0.0.1", port=0, credentials=creds)
        await kube.start()
        write_kubeconfig(creds, kube.url, settings.data_dir / "kubeconfig")
        fleet = Watchers(watchers, kube.port)
        try:
            ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}}
            await _call(api, "apply", {"items": [{"manifest": ns}]})
            await _call(api, "apply", {"items": _pods("p", 50)})
            await fleet.start(settings)  # none when watchers is 0
            await asyncio.sleep(1.0)
            stats0 = dict(kube.watches.stats)
            cpu0 = time.process_time()
            for i in range(updates):
                status = {
                    "phase": "Pending",
                    "conditions": [{"type": "PodScheduled", "status": "False", "reason": f"r{i}"}],
                }
                await _call(
                    api, "status", {"kind": "Pod", "namespace": "b", "name": f"p{i % 50}", "status": status}
                )
                if pace:
                    await asyncio.sleep(pace)
            await _call(api, "apply", {"items": _pods("q", 200)})
            await asyncio.sleep(0.5)
            cpu = time.process_time() - cpu0
            stats = {k: v - stats0.get(k, 0) for k, v in kube.watches.stats.items()}
            await fleet.stop()
            return cpu, fleet.events, stats
        finally:
            if fleet.proc is not None and fleet.proc.returncode is None:
                fleet.proc.kill()
                await fleet.proc.wait()
            await kube.stop()
            await api.stop()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}",
        "loadavg_before": [round(x, 2) for x in os.getloadavg()],
        "watchers": args.watchers,
        "updates": args.updates,
        "pace_s": args.pace,
    }
    alone, _, _ = await measure(0, args.updates, args.pace)
    watched, delivered, stats = await measure(args.watchers, args.updates, args.pace)
    result.update(
        cpu_alone_s=round(alone, 2),
        cpu_watched_s=round(watched, 2),
        events_delivered=delivered,
        us_per_delivery=round((watched - alone) / max(1, delivered) * 1e6, 1),
        wakeups=stats.get("wakeups", 0),
        direct_writes=stats.get("writes", 0),
        lines_built=stats.get("lines", 0),
    )
    print(
        f"{args.watchers} watchers, {args.updates} updates (pace {args.pace}s) + a burst of 200: "
        f"apiserver CPU {alone:.2f}s alone, {watched:.2f}s watched, {delivered} events delivered = "
        f"{result['us_per_delivery']} us per delivered event; {result['wakeups']} wake-ups, "
        f"{result['direct_writes']} direct writes, {result['lines_built']} event lines built"
    )
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.watch_fanout", description=__doc__.splitlines()[0])
    p.add_argument("--watchers", type=int, default=100)
    p.add_argument("--updates", type=int, default=500)
    p.add_argument("--pace", type=float, default=0.0, help="seconds between updates (0: back to back)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    return report(run(args), as_json=args.json)


if __name__ == "__main__":
    raise SystemExit(main())
