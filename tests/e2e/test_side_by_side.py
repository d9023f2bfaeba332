"""Two systems from the same Procfile on one machine, told apart by ``DRAFLOW_PORT_OFFSET`` (and a
data dir) only: no port is shared (no "cannot serve metrics", no "in use"), each CLI finds its own
system, and each system's spans land in its own receiver."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from draflow.infra.ports import Ports
from tests.helpers import free_port_offset
from tests.processes import HonchoSystem

# the receiver, NATS, two services that serve metrics and the Kubernetes API's replica (the full
# Procfile runs in test_readme)
PROCESSES = ("nats", "apiserver", "kubeapi", "scheduler", "otlp")
POD = """apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers: [{{name: c, image: busybox}}]
"""
NEVER = (
    "Traceback",
    "CancelledError",
    "cannot serve metrics",
    "cannot serve the Kubernetes API",
    "is in use",
    "cannot export spans",
)


def _ports(ports: Ports) -> set[int]:
    return {
        ports.nats,
        ports.otlp_grpc,
        ports.otlp_http,
        ports.kube_api,
        *(ports.metrics(s) for s in range(1, 20)),
    }


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def test_two_systems_share_no_port_and_no_spans(tmp_path: Path) -> None:
    first = Ports(free_port_offset())
    while _ports(second := Ports(free_port_offset())) & _ports(first):
        pass
    systems = {
        name: HonchoSystem(tmp_path / name, PROCESSES, DRAFLOW_PORT_OFFSET=str(ports.offset))
        for name, ports in (("a", first), ("b", second))
    }
    outputs: dict[str, str] = {}
    try:
        for system in systems.values():
            system.wait_until_it_answers()
        for name, system in systems.items():
            (tmp_path / f"{name}.yaml").write_text(POD.format(name=f"in-{name}"))
            applied = system.draflow("apply", "-f", str(tmp_path / f"{name}.yaml"))
            assert applied.stdout == f"pod/in-{name} created\n", applied.stderr
        for name, system in systems.items():
            traced = system.draflow("trace", "pod", f"in-{name}")
            assert traced.returncode == 0 and "append Pod [producer]" in traced.stdout, traced.stderr
            other = "b" if name == "a" else "a"
            elsewhere = system.draflow("trace", "pod", f"in-{other}", "--wait", "0")
            assert "the pod has no events in the log" in elsewhere.stderr, elsewhere.stderr
        for name, ports in (("a", first), ("b", second)):
            receiver = f"http://127.0.0.1:{ports.otlp_http}/api/traces?tag=messaging.destination.name:"
            mine = json.loads(_get(receiver + f"draflow.ev.Pod.default.in-{name}"))["data"]
            theirs = json.loads(_get(receiver + f"draflow.ev.Pod.default.in-{'b' if name == 'a' else 'a'}"))
            assert mine and theirs["data"] == [], f"system {name}'s receiver has the other system's spans"
            metrics = _get(f"http://127.0.0.1:{ports.metrics(3)}/metrics")  # the scheduler's slot
            assert "scheduler_pending_pods" in metrics
            kubeconfig = (tmp_path / name / "kubeconfig").read_text()  # each system's own API
            assert f"server: https://127.0.0.1:{ports.kube_api}\n" in kubeconfig
        for name, system in systems.items():
            outputs[name] = system.ctrl_c()
    finally:
        for system in systems.values():
            system.kill()
    for name, output in outputs.items():
        for process in PROCESSES:
            assert f"{process}.1 stopped (rc=0)" in output, f"{name}: {process}\n{output}"
        for bad in NEVER:
            assert bad not in output, f"system {name}: {bad!r}\n{output}"
