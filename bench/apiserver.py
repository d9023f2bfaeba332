"""Apiserver throughput: objects admitted per second, request latency, restart (log replay) time.

Starts a private nats-server and the apiserver in-process, then measures:

* ``apply_batch_per_s``: one multi-document apply of N ResourceClaims (decode, default, validate,
  pipelined appends), as ``draflow apply -f`` of a big file;
* ``apply_single_per_s``: one object per request, sequentially (a controller's create loop);
* ``get_per_s``: sequential gets served from memory;
* ``unchanged_per_s``: re-applying the same batch (admission only, nothing appended);
* ``replay_per_s``: a second apiserver folding the whole log at start.

Run::

    python -m bench.apiserver [--objects 2000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from infra.config import Settings
from infra.eventstore import EventStore
from infra.natsd import LocalNatsServer
from services.apiserver.server import ApiServer
from services.runtime.client import ApiClient


def claim(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{i:06d}", "namespace": "default", "labels": {"bench": "yes"}},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.example.com",
                            "selectors": [
                                {"cel": {"expression": "device.attributes['gpu.example.com'].model == 'a'"}}
                            ],
                        },
                    }
                ]
            }
        },
    }


async def measure(url: str, n: int) -> dict[str, float]:
    settings = Settings(nats_url=url, stream="BENCH", root="bench")
    events = await EventStore.open(settings, "apiserver")
    server = ApiServer(events)
    await server.start()
    api = await ApiClient.connect(settings, timeout_s=120)
    out: dict[str, float] = {}
    try:
        docs = [claim(i) for i in range(n)]
        t = time.perf_counter()
        results = await api.apply(docs)
        out["apply_batch_per_s"] = n / (time.perf_counter() - t)
        assert all(r.outcome == "created" for r in results), results[:3]

        t = time.perf_counter()
        await api.apply(docs)
        out["unchanged_per_s"] = n / (time.perf_counter() - t)

        singles = [claim(n + i) for i in range(min(n, 500))]
        t = time.perf_counter()
        for doc in singles:
            await api.apply([doc])
        out["apply_single_per_s"] = len(singles) / (time.perf_counter() - t)

        t = time.perf_counter()
        for i in range(min(n, 500)):
            await api.get("ResourceClaim", f"claim-{i:06d}")
        out["get_per_s"] = min(n, 500) / (time.perf_counter() - t)

        total = await events.stream_last_seq()
        replica = ApiServer(await EventStore.open(settings, "apiserver-2"))
        t = time.perf_counter()
        await replica.store.start()
        out["replay_per_s"] = total / (time.perf_counter() - t)
        await replica.stop()
        await replica.events.close()
    finally:
        await api.close()
        await server.stop()
        await events.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalNatsServer(Path(tmp) / "store") as nats:
        results = asyncio.run(measure(nats.url, args.objects))
    for key, value in results.items():
        print(f"{key:22} {value:10.0f}")
    if args.json:
        print(json.dumps({k: round(v) for k, v in results.items()}))


if __name__ == "__main__":
    main()
