"""``draflow up`` (the packaged Procfile, from any directory) and ``draflow examples``.

That the wheel ships the Procfile and the examples: ``tests/test_packaging.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from draflow.infra.ports import Ports
from draflow.services.cli.up import packaged_procfile, procfile
from tests.helpers import free_port_offset
from tests.paths import ROOT

BIN = Path(sys.executable).parent


def test_the_packaged_procfile_is_the_checkouts() -> None:
    """One Procfile: ``honcho start`` in a checkout and ``draflow up`` run the same processes."""
    assert packaged_procfile() == (ROOT / "Procfile").read_text()


def test_nodes_and_gpus_replace_the_kubelets() -> None:
    default = dict(procfile())
    assert [n for n in default if n.startswith("kubelet_node_")] == [f"kubelet_node_{i}" for i in range(1, 5)]
    six = procfile(nodes=6, gpus=2)
    names = [n for n, _ in six]
    assert names.count("apiserver") == 1 and [n for n in names if n.startswith("kubelet")] == [
        f"kubelet_node_{i}" for i in range(1, 7)
    ]
    cmds = dict(six)
    assert cmds["kubelet_node_1"] == default["kubelet_node_1"].replace("--gpus 8", "--gpus 2")  # labels kept
    # kubelets 5 and 6 take the first metrics slots no other service holds (15-17 are taken)
    assert (
        cmds["kubelet_node_6"]
        == "DRAFLOW_METRICS_SLOT=19 exec python -m draflow.services.kubelet --node node-6 --gpus 2"
    )
    many = [c.split("DRAFLOW_METRICS_SLOT=", 1)[1].split()[0] for _, c in procfile(nodes=80) if "SLOT=" in c]
    assert len(many) == len(set(many)), "two processes on one metrics port"
    # each kubelet with its gpu.example.com plugin process, right after it
    assert names[names.index("kubelet_node_6") + 1] == "gpu_plugin_node_6"
    assert cmds["gpu_plugin_node_6"] == (
        "exec python -m draflow.services.drivers.gpu_example.node --node node-6 --gpus 2"
    )
    plugins = [n for n in names if n.startswith("gpu_plugin_node_")]
    assert plugins == [f"gpu_plugin_node_{i}" for i in range(1, 7)]
    assert "gpu_plugin_node_1" not in dict(procfile(nodes=2, gpus=0))
    # the classic drivers' plugins where the demo's labels ask for them, also without GPUs
    # (and frobnicator.example.com's, where a node is labelled with its frobnicators)
    prefixes = ("fpga_plugin_node_", "acme_plugin_node_", "frob_plugin_node_")
    classic = [n for n in names if n.startswith(prefixes)]
    assert classic == [n for n in default if n.startswith(prefixes)]
    assert classic == [
        "fpga_plugin_node_1",
        "acme_plugin_node_1",
        "frob_plugin_node_1",
        "fpga_plugin_node_2",
        "frob_plugin_node_2",
        "acme_plugin_node_3",
        "acme_plugin_node_4",
    ]
    frob = "--driver frobnicator.example.com --node node-2"
    assert cmds["frob_plugin_node_2"] == f"exec python -m draflow.services.drivers.classic_plugin {frob}"
    assert cmds["acme_plugin_node_3"] == (
        "exec python -m draflow.services.drivers.classic_plugin --driver gpu.acme.com --node node-3"
    )
    assert "fpga_plugin_node_2" in dict(procfile(nodes=2, gpus=0))
    plugin_prefixes = ("gpu_plugin_node_", *prefixes)
    assert [n for n, _ in procfile(nodes=0)] == [
        n for n in default if not n.startswith(("kubelet_node_", *plugin_prefixes))
    ]
    # the server's launcher makes exactly these kubelets' credentials up front
    nodes = ",".join(f"node-{i}" for i in range(1, 7))
    assert cmds["nats"] == f"exec python -m draflow.infra.natsd --nodes {nodes}"
    assert dict(procfile(nodes=0))["nats"] == "exec python -m draflow.infra.natsd"


def test_examples_list_and_path(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(BIN / "draflow"), "examples", "list"], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0
    listed = out.stdout.split()
    assert "dra-example-driver/deviceclass.yaml" in listed and "extended-resources/deployment.yaml" in listed
    path = subprocess.run(
        [str(BIN / "draflow"), "examples", "path"], cwd=tmp_path, capture_output=True, text=True
    )
    assert (Path(path.stdout.strip()) / "dra-example-driver" / "deviceclass.yaml").is_file()


def test_draflow_up_runs_the_system_from_any_directory(tmp_path: Path) -> None:
    ports = Ports(free_port_offset())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRAFLOW_", "OTEL_"))}
    env["PATH"] = os.environ.get("PATH", "")  # no activated venv needed: up runs its own python
    data = tmp_path / "state"
    log = (tmp_path / "up.log").open("w")
    up = subprocess.Popen(
        [
            str(BIN / "draflow"),
            "up",
            "--data-dir",
            str(data),
            "--nodes",
            "2",
            "--gpus",
            "3",
            "--port-offset",
            str(ports.offset),
        ],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    kube_env = {**env, "KUBECONFIG": str(data / "kubeconfig"), "HOME": str(tmp_path)}

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "kubectl"), *args], env=kube_env, capture_output=True, text=True, timeout=30
        )

    try:
        deadline = time.monotonic() + 90
        while True:
            assert up.poll() is None, (tmp_path / "up.log").read_text()[-3000:]
            if (data / "kubeconfig").exists():
                slices = kubectl("get", "resourceslices", "-o", "jsonpath={.items[*].spec.nodeName}")
                if slices.returncode == 0 and sorted(slices.stdout.split()) == ["node-1", "node-2"]:
                    break
            assert time.monotonic() < deadline, (tmp_path / "up.log").read_text()[-3000:]
            time.sleep(0.5)
        devices = kubectl(
            "get", "resourceslices", "-o", "jsonpath={range .items[*]}{.spec.devices[*].name}{'\\n'}{end}"
        )
        assert [len(line.split()) for line in devices.stdout.splitlines()] == [3, 3]
        assert f":{ports.kube_api}" in (data / "kubeconfig").read_text()
    finally:
        up.send_signal(signal.SIGINT)  # Ctrl-C: honcho's manager stops every process
        try:
            up.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        log.close()
    assert up.returncode in (0, 130, -signal.SIGINT), (tmp_path / "up.log").read_text()[-3000:]
