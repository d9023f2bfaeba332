"""Every role tries what it must not do, on a real authenticated nats-server, and is refused.

The server is configured exactly as ``python -m draflow.infra.natsd`` configures it (the same authority,
the same accounts file); each refusal is nats-server's own ``Permissions Violation``. Positive
controls show each role can still do its job, so a refusal is the permission, not a broken setup.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client

from draflow.infra.auth.authority import auth_dir, creds_path
from draflow.infra.auth.roles import ADMIN, STATIC_ROLES, kubelet_role
from tests.security.system import Caller, SecuredServer

NON_ADMIN = [r.name for r in STATIC_ROLES if r.name != ADMIN] + [kubelet_role("node-1").name]
STREAM_CHANGES = [
    "$JS.API.STREAM.DELETE.DRAFLOW",
    "$JS.API.STREAM.PURGE.DRAFLOW",
    "$JS.API.STREAM.UPDATE.DRAFLOW",
    "$JS.API.STREAM.CREATE.DRAFLOW",
    "$JS.API.STREAM.MSG.DELETE.DRAFLOW",
    "$JS.API.STREAM.SNAPSHOT.DRAFLOW",
    "$JS.API.STREAM.RESTORE.DRAFLOW",
    "$JS.API.STREAM.DELETE.DRAFLOW_DLQ",
    "$JS.API.STREAM.PURGE.DRAFLOW_DLQ",
]


async def _ack(caller: Caller, subject: str) -> dict:
    reply = await caller.nc.request(subject, b'{"forged": false}', timeout=5)
    return json.loads(reply.data)


@pytest.mark.parametrize("role", NON_ADMIN)
async def test_no_role_but_the_admin_changes_the_stream(as_role, role: str) -> None:
    """Delete, purge, update, re-create, delete a message, snapshot or restore: all refused."""
    caller = await as_role(role)
    for subject in STREAM_CHANGES:
        message = await caller.publish_refused(subject, b'{"name": "DRAFLOW"}')
        assert "permissions violation for publish" in message
    admin = await as_role(ADMIN)
    info = json.loads((await admin.nc.request("$JS.API.STREAM.INFO.DRAFLOW", b"", timeout=5)).data)
    assert info["config"]["name"] == "DRAFLOW" and info["config"]["deny_delete"] is True


async def test_the_admin_may_change_the_stream(as_role) -> None:
    """The positive control: the same request the others were refused, as the admin."""
    admin = await as_role(ADMIN)
    info = json.loads((await admin.nc.request("$JS.API.STREAM.INFO.DRAFLOW", b"", timeout=5)).data)
    config = {**info["config"], "description": "draflow event log (admin was here)"}
    updated = json.loads(
        (await admin.nc.request("$JS.API.STREAM.UPDATE.DRAFLOW", json.dumps(config).encode(), timeout=5)).data
    )
    assert updated.get("error") is None, updated
    assert updated["config"]["description"].endswith("(admin was here)")


@pytest.mark.parametrize("role", [r for r in NON_ADMIN if r not in ("apiserver", "garbage-collector")])
async def test_no_role_appends_as_the_apiserver(as_role, role: str) -> None:
    """Kinds only the apiserver writes (DeviceClass, Namespace) are closed to every other role."""
    caller = await as_role(role)
    for subject in ("draflow.ev.DeviceClass._.gpu~example~com", "draflow.ev.Namespace._.kube-system"):
        await caller.publish_refused(subject)


async def test_each_role_appends_only_its_kinds(as_role) -> None:
    scheduler = await as_role("scheduler")
    assert (await _ack(scheduler, "draflow.ev.Pod.default.p"))["stream"] == "DRAFLOW"
    await scheduler.publish_refused("draflow.ev.Deployment.default.d")
    acme = await as_role("acme-gpu-driver")
    assert (await _ack(acme, "draflow.ev.NodeGpuCapacity._.node-1"))["stream"] == "DRAFLOW"
    await acme.publish_refused("draflow.ev.ResourceSlice._.node-1-gpu")


async def test_the_cli_reaches_the_api_and_reads_but_never_appends(as_role) -> None:
    """The issue's forgery (`js.publish("draflow.ev.Pod.default.forged", ...)`) is refused."""
    cli = await as_role("cli")
    await cli.publish_refused("draflow.ev.Pod.default.forged", b"{not json")
    await cli.publish_refused("draflow.dlq.x")
    # the request API is open to it (no apiserver runs here: nobody answers)
    with pytest.raises(nats.errors.NoRespondersError):
        await cli.nc.request("draflow.api.list", b"{}", timeout=2)
    # and the log is readable
    info = json.loads((await cli.nc.request("$JS.API.STREAM.INFO.DRAFLOW", b"", timeout=5)).data)
    assert info["state"]["last_seq"] >= 0


async def test_a_kubelet_cannot_publish_on_the_log_or_speak_for_another_node(as_role) -> None:
    kubelet = await as_role("kubelet-node-1")
    await kubelet.publish_refused("draflow.ev.Pod.default.p")  # its writes go through the apiserver
    await kubelet.publish_refused("draflow.ev.Lease.kube-node-lease.node-1")
    await kubelet.publish_refused("draflow.api.status")  # not the privileged API either
    await kubelet.publish_refused("draflow.node.node-2.status")  # nor another node's
    with pytest.raises(nats.errors.NoRespondersError):  # its own node's API is open to it
        await kubelet.nc.request("draflow.node.node-1.status", b"{}", timeout=2)


async def test_the_kube_api_replica_forwards_writes_and_appends_nothing(as_role) -> None:
    """Its requests name the user they are for, so it has a subject of its own; it writes the log
    only through the apiserver's admission."""
    replica = await as_role("kube-api")
    with pytest.raises(nats.errors.NoRespondersError):  # its subject is open to it
        await replica.nc.request("draflow.kapi.apply", b"{}", timeout=2)
    await replica.publish_refused("draflow.ev.Pod.default.p")
    await replica.publish_refused("draflow.api.apply")
    info = json.loads((await replica.nc.request("$JS.API.STREAM.INFO.DRAFLOW", b"", timeout=5)).data)
    assert info["state"]["last_seq"] >= 0  # and it reads the log


@pytest.mark.parametrize("role", [r for r in NON_ADMIN if r not in ("apiserver", "kube-api")])
async def test_no_role_but_the_replica_speaks_for_a_kubernetes_user(as_role, role: str) -> None:
    caller = await as_role(role)
    await caller.publish_refused("draflow.kapi.apply", b'{"items": []}')


@pytest.mark.parametrize("role", [r for r in NON_ADMIN if r != "apiserver"])
async def test_no_role_answers_for_the_apiserver_or_reads_others_replies(as_role, role: str) -> None:
    caller = await as_role(role)
    for subject in ("draflow.api.*", "draflow.node.*.*", "draflow.kapi.*", "_INBOX.>"):
        await caller.nc.subscribe(subject)
        await caller.nc.flush()
        message = await caller.refused(subject)
        assert "permissions violation for subscription" in message
    await caller.publish_refused("_INBOX.someone.else.1")  # nor forge an answer


async def _refused_connection(url: str, **options: Any) -> None:
    nc = Client()
    try:
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nc.connect(url, allow_reconnect=False, max_reconnect_attempts=0, **options)
    finally:
        await nc.close()


async def test_no_credential_no_connection(secured: SecuredServer) -> None:
    await _refused_connection(secured.settings.nats_url)


async def test_a_seed_of_the_wrong_role_is_not_enough(secured: SecuredServer, tmp_path: Path) -> None:
    """A made-up seed is no credential: the server knows only the public keys it was given."""
    import os

    import nkeys

    fake = tmp_path / "fake.nk"
    fake.write_bytes(bytes(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)))
    await _refused_connection(secured.settings.nats_url, nkeys_seed=str(fake))


def test_credentials_are_readable_by_their_owner_only(secured: SecuredServer) -> None:
    directory = auth_dir(secured.settings)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    conf = (secured.settings.data_dir / "nats" / "accounts.conf").read_text()
    for role in [*(r.name for r in STATIC_ROLES)]:
        path = creds_path(secured.settings, role)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        seed = path.read_text().strip()
        assert seed.startswith("SU")  # an nkey user seed
        assert seed not in conf  # the server's configuration holds public keys only
