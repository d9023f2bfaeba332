"""The demo through the real kubectl, as on a cluster: ``honcho start`` (the Procfile's ``kubeapi``
replica serves the Kubernetes API and writes ``$DRAFLOW_DATA_DIR/kubeconfig``), then kubectl applies the
dra-example-driver examples, watches the pods go Pending -> Running, waits for them, reads claims,
describes, and deletes the namespaces; then the KEP-5004 manifests (server-side apply), kubectl
scale, the special claims and the quota's usage."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from draflow.infra.ports import Ports
from tests.e2e.demo import EXAMPLES, EXAMPLES_DIR
from tests.helpers import free_port_offset
from tests.paths import ROOT
from tests.processes import VENV_BIN, HonchoSystem

NAMESPACES = [name.split("--", 1)[0] for name in EXAMPLES]


def _kubectl(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "kubectl"), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_kubectl_runs_the_demo(tmp_path: Path) -> None:
    ports = Ports(free_port_offset())
    data = tmp_path / "data"
    system = HonchoSystem(data, DRAFLOW_PORT_OFFSET=str(ports.offset))
    env = {**os.environ, "KUBECONFIG": str(data / "kubeconfig"), "HOME": str(tmp_path)}
    watcher: subprocess.Popen[str] | None = None
    reader: threading.Thread | None = None
    try:
        deadline = time.monotonic() + 90
        while not (data / "kubeconfig").exists() or _kubectl(env, "get", "nodes").returncode != 0:
            assert system.proc.poll() is None, system.output()[-4000:]
            assert time.monotonic() < deadline, f"kubectl never got an answer:\n{system.output()[-4000:]}"
            time.sleep(0.3)
        assert f"https://127.0.0.1:{ports.kube_api}" in (data / "kubeconfig").read_text()
        # every kubelet registered its node, the driver created its DeviceClass (kubectl apply racing
        # the driver's create would get AlreadyExists, as on a cluster)
        deadline = time.monotonic() + 60
        while (
            len(_kubectl(env, "get", "nodes", "-o", "name").stdout.split()) < 4
            or _kubectl(env, "get", "deviceclass", "gpu.example.com").returncode != 0
        ):
            assert time.monotonic() < deadline
            time.sleep(0.3)

        watcher = subprocess.Popen(
            [
                str(VENV_BIN / "kubectl"),
                "get",
                "pods",
                "-n",
                "basic-resourceclaimtemplate",
                "-w",
                "--no-headers",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        seen: list[list[str]] = []
        running = threading.Event()

        def read() -> None:
            assert watcher is not None and watcher.stdout is not None
            for line in watcher.stdout:
                seen.append(line.split())
                if line.split()[:3] == ["pod0", "1/1", "Running"]:
                    running.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        files = [arg for name in ("deviceclass.yaml", *EXAMPLES) for arg in ("-f", str(EXAMPLES_DIR / name))]
        applied = _kubectl(env, "apply", *files)
        assert applied.returncode == 0, applied.stderr
        assert "pod/pod0 created" in applied.stdout

        assert running.wait(120), f"kubectl get -w never showed pod0 Running: {seen}"
        pod0 = [row[2] for row in seen if row[0] == "pod0"]
        assert pod0[0] == "Pending" and pod0[-1] == "Running"

        waited = _kubectl(
            env, "wait", "--for=condition=Ready", "pods", "--all", "-A", "--timeout=120s", timeout=150
        )
        assert waited.returncode == 0, waited.stderr
        assert waited.stdout.count("condition met") == len(
            _kubectl(env, "get", "pods", "-A", "-o", "name").stdout.split()
        )
        claims = _kubectl(env, "get", "resourceclaims", "-A", "--no-headers").stdout.splitlines()
        assert claims and all(line.split()[2] == "allocated,reserved" for line in claims), claims
        wide = _kubectl(env, "get", "pods", "-A", "-o", "wide", "--no-headers").stdout.splitlines()
        assert all(line.split()[7].startswith("node-") for line in wide), wide
        described = _kubectl(env, "describe", "pod", "pod0", "-n", "basic-resourceclaimtemplate").stdout
        assert "Status:       Running" in described and "Events:" in described
        node = _kubectl(env, "describe", "node", "node-1").stdout
        assert "Name:               node-1" in node and "Ready            True" in node

        deleted = _kubectl(env, "delete", "namespace", *NAMESPACES, "--timeout=120s", timeout=150)
        assert deleted.returncode == 0, deleted.stderr
        assert _kubectl(env, "get", "resourceclaims", "-A", "-o", "name").stdout == ""

        # KEP-5004 as written: the class maps example.com/gpu, quota and a Deployment asking for it
        kep = ROOT / "examples" / "extended-resources"
        assert _kubectl(env, "apply", "-f", str(kep / "gpu-example-extended.yaml")).returncode == 0
        applied = _kubectl(
            env, "apply", "--server-side", "-f", str(kep / "quota.yaml"), "-f", str(kep / "deployment.yaml")
        )
        assert applied.returncode == 0, applied.stderr
        scaled = _kubectl(env, "scale", "deployment", "demo", "--replicas=3")
        assert scaled.stdout.strip() == "deployment.apps/demo scaled", scaled.stderr
        deadline = time.monotonic() + 120
        while len(_kubectl(env, "get", "pods", "-l", "app=demo", "-o", "name").stdout.split()) < 3:
            assert time.monotonic() < deadline, "the Deployment never had three pods"
            time.sleep(0.5)
        waited = _kubectl(
            env, "wait", "--for=condition=Ready", "pod", "-l", "app=demo", "--timeout=120s", timeout=150
        )
        assert waited.returncode == 0 and waited.stdout.count("condition met") == 3, waited.stderr
        special = _kubectl(
            env,
            "get",
            "resourceclaims",
            "-o",
            r"jsonpath={range .items[*]}{.metadata.annotations.resource\.kubernetes\.io/"
            r"extended-resource-claim}{'\n'}{end}",
        )
        assert special.stdout.split() == ["true", "true", "true"], special.stdout + special.stderr
        deadline = time.monotonic() + 60
        while (
            used := _kubectl(
                env,
                "get",
                "resourcequota",
                "gpu",
                "-o",
                "jsonpath={.status.used.requests\\.example\\.com/gpu}",
            ).stdout
        ) != "3":
            assert time.monotonic() < deadline, f"quota used: {used!r}"
            time.sleep(0.5)
    finally:
        if watcher is not None:
            watcher.terminate()
            watcher.wait()
            if reader is not None:
                reader.join(10)
            if watcher.stdout is not None:
                watcher.stdout.close()
        system.ctrl_c()
