"""The real thing: ``python -m draflow.services.apiserver`` and ``draflow`` as separate processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from tests.helpers import wait_until

CLAIM = """\
apiVersion: v1
kind: Namespace
metadata:
  name: e2e
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: gpu
  namespace: e2e
  finalizers: [example.com/hold]
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com}
"""


class Proc:
    """A subprocess whose combined output is collected line by line on a thread."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(15)
        finally:
            self._reader.join(5)
            if self.proc.stdout is not None:
                self.proc.stdout.close()


def draflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "draflow.services.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "DRAFLOW_NATS_URL": settings.nats_url,
        "DRAFLOW_STREAM": settings.stream,
        "DRAFLOW_SUBJECT_ROOT": settings.root,
        "PYTHONUNBUFFERED": "1",
    }


def test_apiserver_and_cli_processes(env: dict[str, str], settings: Settings, tmp_path: Path) -> None:
    manifest = tmp_path / "claim.yaml"
    manifest.write_text(CLAIM)
    api = Proc(["draflow.services.apiserver"], env)
    watch: Proc | None = None
    try:
        wait_until(lambda: any("serving" in line for line in api.lines), timeout_s=30)
        applied = draflow(env, "apply", "-f", str(manifest))
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout == "namespace/e2e created\nresourceclaim.resource.k8s.io/gpu created\n"

        watch = Proc(["draflow.services.cli", "get", "resourceclaims", "-n", "e2e", "-w"], env)
        wait_until(lambda: len(watch.lines) >= 2, timeout_s=30)
        assert watch.lines[0].split() == ["NAME", "STATE", "AGE"]
        assert watch.lines[1].split()[:2] == ["gpu", "pending"]

        deleted = draflow(env, "delete", "rc", "gpu", "-n", "e2e", "--wait=false")
        assert deleted.stdout == 'resourceclaim.resource.k8s.io "gpu" deleted\n'
        wait_until(
            lambda: any(line.split()[:2] == ["gpu", "deleted"] for line in watch.lines[2:]), timeout_s=30
        )

        got = draflow(env, "get", "rc", "gpu", "-n", "e2e", "-o", "yaml")
        assert "deletionTimestamp:" in got.stdout and "- example.com/hold" in got.stdout
        described = draflow(env, "describe", "rc", "gpu", "-n", "e2e")
        assert described.stdout.startswith("Name:         gpu\nNamespace:    e2e\n")
        missing = draflow(env, "get", "rc", "nope", "-n", "e2e")
        assert missing.returncode == 1
        assert (
            missing.stderr
            == 'Error from server (NotFound): resourceclaims.resource.k8s.io "nope" not found\n'
        )
    finally:
        if watch is not None:
            watch.stop()
        code = api.stop()
        asyncio.run(_drop_stream(settings))
    assert code == 0, "\n".join(api.lines)
    assert not any("Traceback" in line for line in api.lines), "\n".join(api.lines)


async def _drop_stream(settings: Settings) -> None:
    store = await EventStore.open(settings, "cleanup")
    try:
        for name in (settings.stream, settings.dlq_stream):
            await store.js.delete_stream(name)
    finally:
        await store.close()
