"""The chaos suite: every service its own process, SIGKILLed at random while a Deployment churns.

``test_short_chaos_run`` (default run, ~1 min): nats-server, the control plane, the driver and two
kubelets from the Procfile; ``test_long_chaos_run`` (``-m slow``): every Procfile process for five
minutes. Each prints its figures (kills per process, scale changes, convergence time); the last
long run's are in docs/reliability.md. ``DRAFLOW_CHAOS_SEED`` replays a run's choices.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from draflow.infra.config import Settings
from draflow.infra.ports import Ports
from tests.chaos.procfile import ProcSystem, procfile_lines
from tests.chaos.run import ChaosRun
from tests.helpers import free_port_offset
from tests.paths import ROOT

SHORT = [
    "nats",
    "apiserver",
    "claim_controller",
    "scheduler",
    "workloads",
    "garbage_collector",
    "gpu_driver",
    "kubelet_node_1",
    "gpu_plugin_node_1",
    "kubelet_node_2",
    "gpu_plugin_node_2",
]


def seed() -> int:
    return int(os.environ.get("DRAFLOW_CHAOS_SEED") or random.randrange(1 << 30))


async def chaos(
    tmp_path: Path,
    procfile: Path,
    names: list[str],
    *,
    duration_s: float,
    capacity: int,
    cluster: int = 0,
) -> ChaosRun:
    offset = free_port_offset()
    ports = Ports(offset)
    data = tmp_path / "data"
    system = ProcSystem(procfile, data, offset, names)
    nodes = [
        n.removeprefix("kubelet_").replace("_", "-") for n in system.commands if n.startswith("kubelet_")
    ]
    url = ports.cluster_urls(cluster) if cluster else ports.nats_url
    settings = Settings(nats_url=url, data_dir=data, role="cli")
    run = ChaosRun(
        system, settings, killable=list(system.commands), nodes=nodes, capacity=capacity, seed=seed()
    )
    system.start_all()
    try:
        await run.start()
        await run.churn(duration_s)
        problems = await run.converge(run.rng.randint(1, capacity))
        print(run.figures.report())
        logs = "\n".join(f"== {n}\n{system.tail(n, 1500)}" for n in names) if problems else ""
        assert problems == [], f"{run.figures.report()}\n" + "\n".join(problems) + "\n" + logs
    finally:
        await run.stop()
        system.stop_all()
    return run


async def test_short_chaos_run(tmp_path: Path) -> None:
    run = await chaos(tmp_path, ROOT / "Procfile", SHORT, duration_s=25, capacity=12)
    assert sum(run.figures.kills.values()) >= 3 and run.figures.scale_changes >= 5


@pytest.mark.slow
async def test_long_chaos_run(tmp_path: Path) -> None:
    names = list(procfile_lines(ROOT / "Procfile"))
    run = await chaos(tmp_path, ROOT / "Procfile", names, duration_s=300, capacity=24)
    assert sum(run.figures.kills.values()) >= 40
