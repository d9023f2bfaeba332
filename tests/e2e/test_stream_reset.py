"""The event stream deleted and created again under the running system (issue 14), real processes.

Before, every service kept its old position and ignored the new log: new pods stayed Pending with
no events, kubelets kept CDI specs of claims that no longer existed. Now the control-plane
services stop with exit 3 and one line naming the stream and both positions (a restart rebuilds
them from the new log), and the kubelet rebuilds in place: it unprepares what the new log no
longer has, then serves the new log once an apiserver is back.
"""

from __future__ import annotations

import asyncio
import json
import re

from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.service import EXIT_STREAM_RESET
from tests.helpers import wait_for
from tests.paths import ROOT
from tests.processes import GPU_PLUGIN, Proc, stop_cleanly
from tests.shells import manifests, start_runtime

NODE = "node-1"
EXAMPLES = ROOT / "examples" / "dra-example-driver"
DOCS = ["deviceclass.yaml", "basic-resourceclaimtemplate--basic-resourceclaimtemplate.yaml"]
NS = "basic-resourceclaimtemplate"

CONTROL_PLANE: tuple[tuple[str, list[str], str | None], ...] = (
    ("draflow.services.claim_controller", [], "claim-controller: following"),
    ("draflow.services.scheduler", [], None),
    ("draflow.services.drivers.gpu_example", [], "gpu-example-driver: publishing"),
)


def _claim_specs(settings: Settings) -> list[str]:
    return sorted(
        p.name
        for p in (settings.data_dir / "cdi" / NODE).glob("*.json")
        if not p.name.endswith("_common.json")
    )


def _checkpoint_entries(settings: Settings) -> int:
    state = settings.data_dir / f"kubelet-{NODE}" / "dra_manager_state"
    return len(json.loads(json.loads(state.read_text())["Data"])["Entries"])


async def _start_control_plane(settings: Settings) -> list[Proc]:
    api = Proc(settings, "draflow.services.apiserver")
    await asyncio.to_thread(api.expect, "apiserver: serving", 60)
    procs = [api, *(Proc(settings, module, args) for module, args, _ in CONTROL_PLANE)]
    for proc, (_, _, ready) in zip(procs[1:], CONTROL_PLANE, strict=True):
        if ready:
            await asyncio.to_thread(proc.expect, ready, 90)
    return procs


async def _run_examples(settings: Settings) -> None:
    """Apply the example (two pods, one GPU claim each) and wait until both run with CDI specs."""
    probe, events = await start_runtime(settings, "e2e-probe")
    try:
        await wait_for(lambda: len(probe.items("ResourceSlice")) == 1, 60, "the node's slice")
        docs = [d for name in DOCS for d in manifests((EXAMPLES / name).read_text())]
        for result in await probe.api.apply(docs):
            assert result.error is None, result.error

        def running() -> bool | list[str]:
            pods = probe.items("Pod", NS)
            phases = [f"{p.metadata.name}: {p.status.phase}" for p in pods]
            return (len(pods) == 2 and all(p.status.phase == "Running" for p in pods)) or phases

        await wait_for(running, 120, "both pods Running")
        await wait_for(lambda: len(_claim_specs(settings)) == 2, 30, "a CDI spec per claim")
    finally:
        await probe.stop()
        await events.close()


async def test_a_recreated_stream_stops_the_control_plane_and_rebuilds_the_kubelet(
    settings: Settings,
) -> None:
    procs = await _start_control_plane(settings)
    kubelet = Proc(settings, "draflow.services.kubelet", ["--node", NODE, "--gpus", "2"])
    plugin = Proc(settings, GPU_PLUGIN, ["--node", NODE, "--gpus", "2"])
    try:
        await asyncio.to_thread(kubelet.expect, f"kubelet {NODE}: registered", 90)
        await asyncio.to_thread(plugin.expect, f"gpu.example.com plugin on {NODE}: serving", 90)
        await _run_examples(settings)
        before = _claim_specs(settings)
        assert _checkpoint_entries(settings) == 2

        admin = await EventStore.open(settings, "admin")
        try:
            position = await admin.stream_last_seq()
            await admin.js.delete_stream(settings.stream)
            await admin.ensure_stream()  # as a restarted apiserver did: the stream is back, empty
        finally:
            await admin.close()

        # every control-plane service stops loudly, naming the stream and the positions
        for proc in procs:
            code = await asyncio.to_thread(proc.wait, 60)
            assert code == EXIT_STREAM_RESET, (proc.name, code, proc.stderr[-10:])
            lines = [line for line in proc.stderr if f"stream {settings.stream} was reset" in line]
            assert lines, (proc.name, proc.stderr[-10:])
            found = re.search(r"up to sequence (\d+), the stream now ends at sequence (\d+)", lines[-1])
            assert found is not None, lines[-1]
            assert 0 < int(found[1]) <= position and int(found[2]) < int(found[1])

        # the kubelet rebuilt in place: nothing of the vanished claims is left on the node
        assert kubelet.proc.poll() is None, kubelet.stderr[-10:]
        assert plugin.proc.poll() is None, plugin.stderr[-10:]  # its plugin rebuilt in place too
        await wait_for(
            lambda: _claim_specs(settings) == [] and _checkpoint_entries(settings) == 0,
            30,
            f"CDI specs {before} removed and the checkpoint emptied",
        )

        # restarted, the control plane and the same kubelet work on the new log
        procs = await _start_control_plane(settings)
        await _run_examples(settings)
        assert kubelet.proc.poll() is None
    finally:
        await stop_cleanly([p for p in [*procs, plugin, kubelet] if p.proc.poll() is None])
