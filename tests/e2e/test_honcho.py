"""``honcho start`` runs the Procfile as documented: its own nats-server on the port of
``DRAFLOW_PORT_OFFSET``, data under ``DRAFLOW_DATA_DIR``; the examples run as intended and are
cleaned up; SIGTERM stops it all."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

from draflow.infra.config import Settings
from draflow.infra.ports import Ports
from tests.e2e.demo import EXAMPLES, EXAMPLES_DIR, NODES, check_intended
from tests.helpers import free_port_offset, wait_for
from tests.processes import ROOT
from tests.shells import manifests, start_runtime


def _start(env: dict[str, str], log: IO[str]) -> subprocess.Popen[bytes]:
    honcho = str(Path(sys.executable).parent / "honcho")
    # its own process group: if honcho does not stop in time, the group (honcho and every
    # process of the Procfile) is killed, so a failed run leaves nothing behind
    return subprocess.Popen(
        [honcho, "start"], cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True
    )


async def _stop(honcho: subprocess.Popen[bytes]) -> int:
    """SIGTERM, as Ctrl-C would; SIGKILL to the whole group when it hangs (then fail)."""
    honcho.send_signal(signal.SIGTERM)
    try:
        return await asyncio.to_thread(honcho.wait, 30)
    except subprocess.TimeoutExpired:
        os.killpg(honcho.pid, signal.SIGKILL)
        await asyncio.to_thread(honcho.wait, 10)
        raise


async def test_honcho_start_runs_the_demo(tmp_path: Path) -> None:
    ports = Ports(free_port_offset())  # every port of the system moves with the offset
    # the probe reads the log and calls the API like `draflow` does: with the cli credential the
    # system writes into its data dir on first start
    settings = Settings(nats_url=ports.nats_url, data_dir=tmp_path / "data", role="cli")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DRAFLOW_", "OTEL_"))},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "DRAFLOW_PORT_OFFSET": str(ports.offset),
        "DRAFLOW_DATA_DIR": str(settings.data_dir),
    }
    log = (tmp_path / "honcho.log").open("w")
    honcho = _start(env, log)
    try:
        probe = events = None
        for _ in range(100):  # nats-server is one of the processes: wait until it listens
            try:
                probe, events = await start_runtime(settings, "honcho-probe")
                break
            except Exception:
                await asyncio.sleep(0.3)
        assert probe is not None and events is not None, (tmp_path / "honcho.log").read_text()[-3000:]
        try:
            await wait_for(lambda: len(probe.items("ResourceSlice")) == len(NODES), 90, "slices")
            docs = [d for name in EXAMPLES for d in manifests((EXAMPLES_DIR / name).read_text())]
            for result in await probe.api.apply(docs):
                assert result.error is None, result.error
            expected = {
                (d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "Pod"
            }

            def running() -> bool | list[str]:
                pods = {(p.metadata.namespace, p.metadata.name): p for p in probe.items("Pod")}
                return all(k in pods and pods[k].status.phase == "Running" for k in expected) or sorted(
                    f"{k}" for k in expected if k not in pods or pods[k].status.phase != "Running"
                )

            await wait_for(running, 120, "every pod Running")
            pods = {(p.metadata.namespace, p.metadata.name): p for p in probe.items("Pod")}
            claims = {(c.metadata.namespace, c.metadata.name): c for c in probe.items("ResourceClaim")}
            assert check_intended({k: pods[k] for k in expected}, claims) == []
            for result in await probe.api.delete(
                [("Namespace", "", ns) for ns in sorted({k[0] for k in expected})]
            ):
                assert result.error is None, result.error
            await wait_for(
                lambda: (not probe.items("Pod") and not probe.items("ResourceClaim")) or ["left"],
                120,
                "all gone",
            )
            assert (settings.data_dir / "nats").is_dir()
            assert sorted(p.name for p in (settings.data_dir / "cdi").iterdir()) == list(NODES)
        finally:
            await probe.stop()
            await events.close()
    finally:
        try:
            code = await _stop(honcho)
        finally:
            log.close()
    text = (tmp_path / "honcho.log").read_text()
    assert code in (0, 128 + signal.SIGTERM), text[-3000:]  # honcho reports the signal it got
    stopped = [line for line in text.splitlines() if "stopped (rc=" in line]
    assert all("rc=0" in line for line in stopped), stopped
    names = {line.split("|")[1].split()[0] for line in stopped}
    mine = {
        "claim_controller.1",
        "workloads.1",
        "gpu_driver.1",
        *(f"kubelet_node_{i}.1" for i in range(1, 5)),
    }
    assert mine <= names, names
