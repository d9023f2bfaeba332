"""Regenerate the golden logs in ``tests/data/golden/`` from a real run (not part of the test run).

``python -m tests.events.make_golden [NAME]`` starts a private nats-server and the real services
(apiserver, claim controller, scheduler, gpu.example.com driver, one kubelet with 2 GPUs), applies
the basic ResourceClaimTemplate example with the real CLI (two pods, one GPU each, so two
PodScheduling sagas, claims created from templates, allocated, reserved, prepared), then a pod
asking for a third GPU (unschedulable), deletes the namespace (teardown: unprepare, deallocate,
delete), and writes ``draflow export`` of the whole log to ``tests/data/golden/NAME`` (default
``basic-claim-template.jsonl``; an existing file is never overwritten).

Golden logs are history: regenerate them to *add* a newer log, keep the old files (they are what
``test_golden.py`` proves current code can still read). ``old-schema.jsonl`` is hand-written.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from draflow.events.codec import decode_raw
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.natsd import LocalNatsServer
from tests.processes import ROOT, Proc, draflow

GOLDEN = ROOT / "tests" / "data" / "golden"
EXAMPLES = ROOT / "examples" / "dra-example-driver"
EXAMPLE = EXAMPLES / "basic-resourceclaimtemplate--basic-resourceclaimtemplate.yaml"
NS = "basic-resourceclaimtemplate"
EXTRA_POD = f"""\
apiVersion: v1
kind: Pod
metadata: {{namespace: {NS}, name: pod2}}
spec:
  containers: [{{name: ctr0, image: ubuntu:22.04, resources: {{claims: [{{name: gpu}}]}}}}]
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: single-gpu}}]
"""


def cli(settings: Settings, *args: str, stdin: str | None = None) -> str:
    r = draflow(settings, *args, stdin=stdin)
    if r.returncode != 0:
        raise SystemExit(f"draflow {' '.join(args)} failed: {r.stderr}")
    return r.stdout


async def types(settings: Settings) -> Counter[str]:
    store = await EventStore.open(settings, "golden", ensure=False)
    try:
        seen: Counter[str] = Counter()
        async for records in store.read_raw():
            seen.update(decode_raw(r.data).type for r in records)
        return seen
    finally:
        await store.close()


def wait(settings: Settings, what: str, check: Callable[[Counter[str]], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        seen = asyncio.run(types(settings))
        if check(seen):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}: {dict(seen)}")
        time.sleep(0.3)


def main(argv: list[str]) -> None:
    name = argv[0] if argv else "basic-claim-template.jsonl"
    out = GOLDEN / name
    if out.exists():  # golden logs are history: a new run gets a new file
        hint = "python -m tests.events.make_golden run2.jsonl"
        raise SystemExit(f"{out} exists: name the new log, e.g. {hint}")
    with tempfile.TemporaryDirectory() as tmp:
        server = LocalNatsServer(Path(tmp) / "nats")
        server.start()
        settings = Settings(nats_url=server.url, data_dir=Path(tmp) / "data")
        procs: list[Proc] = []
        try:
            procs.append(Proc(settings, "draflow.services.apiserver"))
            procs[0].expect("apiserver: serving", 60)
            for module, args, ready in (
                ("draflow.services.claim_controller", [], "claim-controller: following"),
                ("draflow.services.scheduler", [], None),
                ("draflow.services.drivers.gpu_example", [], "gpu-example-driver: publishing"),
                (
                    "draflow.services.kubelet",
                    ["--node", "node-1", "--gpus", "2"],
                    "kubelet node-1: registered",
                ),
            ):
                procs.append(Proc(settings, module, args))
                if ready:
                    procs[-1].expect(ready, 90)
            wait(settings, "the node's ResourceSlice", lambda s: s["ResourceSliceApplied"] >= 1)
            cli(settings, "apply", "-f", str(EXAMPLE))
            wait(settings, "both pods running", lambda s: s["PodStarted"] >= 2)
            cli(settings, "apply", "-f", "-", stdin=EXTRA_POD)
            wait(settings, "pod2 unschedulable", lambda s: s["PodUnschedulable"] >= 1)
            cli(settings, "delete", "namespace", NS)
            wait(settings, "the namespace gone", lambda s: s["NamespaceDeleted"] >= 1, timeout_s=90)
            time.sleep(1.0)  # let the last status writes land
        finally:
            for p in reversed(procs):
                p.terminate()
        GOLDEN.mkdir(parents=True, exist_ok=True)
        cli(settings, "export", "-o", str(out))
        server.stop()
        print(f"wrote {out}: {len(out.read_text().splitlines()) - 1} events")


if __name__ == "__main__":
    main(sys.argv[1:])
