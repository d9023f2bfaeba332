"""Event store benchmark: acked appends, pipelined appends, replay (fold) of 100k events.

Starts its own nats-server (JetStream, file storage) in a temporary directory and measures:

* acked appends/s, one at a time: each append waits for its ack before the next (with optimistic
  concurrency on the aggregate, as a service deciding event by event does);
* acked guarded appends/s, one at a time: an event plus a guard message (``infra/guard.py``) in one
  atomic batch, as the scheduler's PreBind appends an allocation; nats-server commits an atomic
  batch differently from a plain publish (on file storage it costs far more), so it is its own figure;
* pipelined appends/s: many appends in flight (``EventStore.append_many``);
* replay events/s: folding the whole stream (decoded into typed msgspec Structs) with a reducer,
  as a service does when it rebuilds its in-memory state at start.

``--json`` prints ``{"append_acked_per_s": ..., "append_guarded_per_s": ..., "append_pipelined_per_s":
..., "replay_per_s": ...}`` as the last line. Targets on a 2-core machine: pipelined >= 5,000/s,
replay >= 50,000/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from bench.harness import Bus
from draflow.events.envelope import Envelope, Event
from draflow.events.union import register_events
from draflow.infra.eventstore import AppendRequest, EventStore
from draflow.infra.guard import guard_subject, take


class BenchClaimAllocated(Event, frozen=True, kw_only=True):
    """A realistically sized event: a claim's allocation result."""

    claim: str
    node: str
    driver: str = "gpu.example.com"
    pool: str
    devices: list[str]
    generation: int = 1


register_events(BenchClaimAllocated)


def _event(i: int) -> BenchClaimAllocated:
    return BenchClaimAllocated(
        claim=f"claim-{i}",
        node=f"node-{i % 50}",
        pool=f"node-{i % 50}",
        devices=[f"gpu-{i % 8}", f"gpu-{(i + 1) % 8}"],
    )


def _fold(state: dict[str, Any], env: Envelope[Event]) -> dict[str, Any]:
    data = env.data
    if isinstance(data, BenchClaimAllocated):
        state["devices"] += len(data.devices)
        state["per_node"][data.node] = state["per_node"].get(data.node, 0) + 1
    state["count"] += 1
    return state


async def run(args: argparse.Namespace) -> dict[str, float]:
    async with Bus("draflow-bench-eventstore-", keep=False) as bus:
        return await measure(bus.store, args)


async def measure(store: EventStore, args: argparse.Namespace) -> dict[str, float]:
    aggregates = 200
    versions = [0] * aggregates
    subjects = [store.subject("ResourceClaim", "bench", f"acked-{i}") for i in range(aggregates)]
    t0 = time.perf_counter()
    for i in range(args.acked):
        a = i % aggregates
        (versions[a],) = await store.append(subjects[a], _event(i), expected_last_seq=versions[a])
    acked = args.acked / (time.perf_counter() - t0)
    print(f"acked appends, one at a time:  {acked:10,.0f} /s  ({args.acked} appends, OCC on 200 aggregates)")

    t0 = time.perf_counter()
    for i in range(args.guarded):
        guard = take(guard_subject(store.root, "device", f"bench/d{i}"), 0, f"claim-{i}", f"uid-{i}")
        subject = store.subject("ResourceClaim", "bench", f"guarded-{i}")
        await store.append(subject, _event(i), expected_last_seq=0, guards=[guard])
    guarded = args.guarded / (time.perf_counter() - t0)
    print(f"guarded appends (atomic batch of event + guard), one at a time: {guarded:10,.0f} /s  ", end="")
    print(f"({args.guarded} appends)")

    reqs = [
        AppendRequest(store.subject("ResourceClaim", "bench", f"claim-{i}"), [_event(i)], 0)
        for i in range(args.pipelined)
    ]
    t0 = time.perf_counter()
    results = await store.append_many(reqs, window=args.window)
    pipelined = args.pipelined / (time.perf_counter() - t0)
    assert len(results) == args.pipelined
    print(f"pipelined appends:             {pipelined:10,.0f} /s  ", end="")
    print(f"({args.pipelined} appends, {args.window} in flight)")

    have = args.acked + 2 * args.guarded + args.pipelined
    if have < args.events:  # fill the stream up to the replay size (not measured)
        fill = [
            AppendRequest(store.subject("ResourceClaim", "fill", f"claim-{i}"), [_event(i)], None)
            for i in range(have, args.events)
        ]
        for k in range(0, len(fill), 20_000):
            await store.append_many(fill[k : k + 20_000], window=args.window)
        del fill
    del reqs, results  # a service replaying at start has a small heap: so should the benchmark
    total = await store.stream_last_seq()

    best, cpu_us = 0.0, 0.0
    for _ in range(args.replays):
        t0, c0 = time.perf_counter(), time.process_time()
        initial: dict[str, Any] = {"count": 0, "devices": 0, "per_node": {}}
        loaded = await store.fold(store.all_events, _fold, initial)
        rate = loaded.state["count"] / (time.perf_counter() - t0)
        assert loaded.state["count"] == total and loaded.version == total
        if rate > best:
            best, cpu_us = rate, (time.process_time() - c0) * 1e6 / total
    print(f"replay (decode + fold):        {best:10,.0f} events/s  ({total} events, best of {args.replays})")
    # wall-clock rates depend on what else runs on the machine; CPU per event much less so
    print(f"  replay client CPU per event: {cpu_us:10.1f} us  (the rest is nats-server and waiting)")
    return {
        "append_acked_per_s": round(acked),
        "append_guarded_per_s": round(guarded),
        "append_pipelined_per_s": round(pipelined),
        "replay_per_s": round(best),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--acked", type=int, default=3000, help="appends measured one at a time")
    p.add_argument("--guarded", type=int, default=300, help="event + guard batches, one at a time")
    p.add_argument("--pipelined", type=int, default=30000, help="appends measured pipelined")
    p.add_argument("--window", type=int, default=1024, help="pipelined appends in flight")
    p.add_argument("--events", type=int, default=100_000, help="events in the stream for the replay")
    p.add_argument("--replays", type=int, default=3, help="replays to run (the best is reported)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object last")
    args = p.parse_args()
    figures = asyncio.run(run(args))
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
