"""Disaster recovery, as docs/reliability.md tells it: back up, destroy, restore, state identical.

On an authenticated server set up as ``python -m draflow.infra.natsd`` sets one up: the real apiserver
admits objects, the scheduler binds pods (direct appends), ``draflow backup`` (the CLI, the admin
credential from the data dir) saves the log; then the server's whole store is deleted and a fresh
server starts with empty streams; ``draflow restore`` brings the log back, and every message
(sequence, subject, bytes, headers) and every object a new apiserver folds from it are the same.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from draflow.events.api.codec import encode_object, object_meta
from draflow.events.dra import PodBound
from draflow.infra.eventstore import EventStore
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient
from tests.paths import ROOT
from tests.security.system import SecuredServer

DRAFLOW = str(Path(sys.executable).parent / "draflow")


def draflow(secured: SecuredServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DRAFLOW_")},
        "DRAFLOW_DATA_DIR": str(secured.settings.data_dir),
        "DRAFLOW_NATS_URL": secured.settings.nats_url,
    }
    return subprocess.run([DRAFLOW, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


async def messages(secured: SecuredServer) -> list[tuple[int, str, bytes, str]]:
    store = await EventStore.open(secured.as_role("admin"), "check", ensure=False)
    try:
        out = []
        async for batch in store.read_raw():
            out += [(r.seq, r.subject, r.data, r.header("Nats-Msg-Id") or "") for r in batch]
        return out
    finally:
        await store.close()


async def objects(secured: SecuredServer) -> dict[tuple[str, str, str], Any]:
    """Every object as a fresh apiserver folds it from the log."""
    events = await EventStore.open(secured.as_role("apiserver"), "apiserver")
    server = ApiServer(events)
    await server.start()
    try:
        index = server.store.index
        kinds = {"Namespace", "DeviceClass", "ResourceClaim", "Pod"}
        return {
            (kind, object_meta(o).namespace, object_meta(o).name): encode_object(o)
            for kind in kinds
            for o in index.items(kind)
        }
    finally:
        await server.stop()
        await events.close()


async def populate(secured: SecuredServer) -> None:
    events = await EventStore.open(secured.as_role("apiserver"), "apiserver")
    server = ApiServer(events)
    await server.start()
    cli = await ApiClient.connect(secured.as_role("cli"), actor="draflow")
    scheduler = await EventStore.open(secured.as_role("scheduler"), "scheduler")
    try:
        docs = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dr"}},
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "gpu.example.com"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]},
            },
        ]
        for i in range(20):
            docs.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": f"c{i}", "namespace": "dr"},
                    "spec": {
                        "devices": {
                            "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.example.com"}}]
                        }
                    },
                }
            )
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"p{i}", "namespace": "dr"},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                }
            )
        for result in await cli.apply(docs):
            assert result.error is None, result.error
        for i in range(0, 20, 2):
            await scheduler.append(
                scheduler.subject("Pod", "dr", f"p{i}"), PodBound(node_name="node-1"), expected_last_seq=None
            )
    finally:
        await scheduler.close()
        await cli.close()
        await server.stop()
        await events.close()


@pytest.fixture
def secured(tmp_path: Path):
    system = SecuredServer(tmp_path / "data")
    system.start()
    try:
        yield system
    finally:
        system.stop()


async def test_back_up_destroy_restore_and_the_state_is_identical(
    secured: SecuredServer, tmp_path: Path
) -> None:
    await populate(secured)
    before, state = await messages(secured), await objects(secured)
    assert len(before) > 50 and sum(1 for k in state if k[0] == "Pod") == 20

    backup = tmp_path / "draflow.backup"
    taken = draflow(secured, "backup", str(backup))
    assert taken.returncode == 0, taken.stderr
    assert f"stream DRAFLOW: {len(before)} messages (seq 1-{before[-1][0]})" in taken.stdout

    # the disaster: the server's store is gone; a new server starts with empty streams
    secured.stop()
    shutil.rmtree(secured.server.store_dir / "jetstream")
    await asyncio.to_thread(secured.start)
    assert await messages(secured) == []

    restored = draflow(secured, "restore", str(backup))
    assert restored.returncode == 0, restored.stderr
    assert f"stream DRAFLOW: restored {len(before)} messages" in restored.stdout
    assert await messages(secured) == before  # every event at its sequence, byte for byte
    assert await objects(secured) == state  # so every object, resourceVersions included

    # a restore never silently replaces a log that holds events
    again = draflow(secured, "restore", str(backup))
    assert again.returncode == 1
    assert again.stderr.startswith(f"error: stream DRAFLOW exists with {len(before)} messages")


def test_a_file_that_is_not_a_backup_is_refused(secured: SecuredServer, tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.write_text("not a tar archive")
    answer = draflow(secured, "restore", str(junk))
    assert answer.returncode == 1 and "not a readable draflow backup" in answer.stderr


async def test_a_backup_of_other_streams_is_refused(secured: SecuredServer, tmp_path: Path) -> None:
    from draflow.infra.backup import StreamBackup, write_backup
    from draflow.services.cli.backup import restore
    from draflow.services.cli.main import UserError

    other = tmp_path / "other.backup"
    write_backup(other, [StreamBackup("ELSEWHERE", {"config": {}, "state": {}}, b"")])
    with pytest.raises(UserError, match="holds streams ELSEWHERE, this system's are DRAFLOW, DRAFLOW_DLQ"):
        await restore(secured.as_role("admin"), other)
