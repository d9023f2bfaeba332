"""How a process finds its credential, and a kubelet of a new node gets one from a running system."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import msgspec
import pytest

from draflow.infra.auth.authority import AuthorityError, creds_path, ensure_authority, public_key
from draflow.infra.auth.client import auth_options, credential_for
from draflow.infra.auth.roles import inbox_prefix
from draflow.infra.config import Settings
from draflow.infra.nats_client import connect
from tests.security.system import SecuredServer


def test_an_open_servers_data_dir_needs_no_credential(tmp_path: Path) -> None:
    assert credential_for(Settings(data_dir=tmp_path), "scheduler") is None


def test_the_roles_own_seed_and_inbox(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    keys = ensure_authority(settings)
    opts = auth_options(settings, "scheduler")
    assert opts["nkeys_seed"] == str(creds_path(settings, "scheduler"))
    assert opts["inbox_prefix"] == inbox_prefix(keys["scheduler"])
    with pytest.raises(AuthorityError, match="no credential for 'someone'"):
        auth_options(settings, "someone")


def test_draflow_nats_creds_wins_and_may_be_a_jwt_creds_file(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    ensure_authority(settings)
    seed = creds_path(settings, "cli").read_text().strip()
    jwt = tmp_path / "user.creds"
    jwt.write_text(
        "-----BEGIN NATS USER JWT-----\neyJ0eXAi.e30.sig\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
    )
    explicit = msgspec.structs.replace(settings, creds=str(jwt))
    opts = auth_options(explicit, "scheduler")  # the file names who we are, not the role
    assert opts["user_credentials"] == str(jwt) and "nkeys_seed" not in opts
    assert opts["inbox_prefix"] == inbox_prefix(public_key(seed.encode()))
    with pytest.raises(AuthorityError, match="no such file"):
        auth_options(msgspec.structs.replace(settings, creds=str(tmp_path / "missing")), "x")


async def test_a_kubelet_of_a_new_node_gets_a_credential_from_the_running_system(tmp_path: Path) -> None:
    """What `python -m draflow.services.kubelet --node node-5` does on the machine of a running system: its
    credential is made, the server reloads, and the kubelet connects as node-5 (and only that)."""
    secured = SecuredServer(tmp_path / "data", nodes=())
    await asyncio.to_thread(secured.start)
    try:
        path = creds_path(secured.settings, "kubelet-node-5")
        assert not path.exists()
        nc = await connect(secured.as_role("kubelet-node-5"), "kubelet-node-5", connect_timeout_s=20)
        try:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert nc.credential == str(path)
            await nc.flush()
        finally:
            await nc.close()
        conf = (secured.settings.data_dir / "nats" / "accounts.conf").read_text()
        assert "kubelet-node-5" in conf and "draflow.node.node-5.*" in conf
    finally:
        secured.stop()


async def test_kubelets_of_new_nodes_starting_together_all_get_working_connections(tmp_path: Path) -> None:
    """Four new nodes' kubelets at once: four credentials, four server reloads while the others
    authenticate. Each connection handed out answers a JetStream request (a client that
    authenticated mid-reload is retried, not handed out half-bound)."""
    secured = SecuredServer(tmp_path / "data", nodes=())
    await asyncio.to_thread(secured.start)
    try:
        names = [f"kubelet-node-{n}" for n in range(5, 9)]
        conns = await asyncio.gather(
            *(connect(secured.as_role(name), name, connect_timeout_s=30) for name in names)
        )
        try:
            for nc in conns:
                reply = await nc.request(f"$JS.API.STREAM.INFO.{secured.settings.stream}", b"", timeout=5)
                assert msgspec.json.decode(reply.data)["config"]["name"] == secured.settings.stream
        finally:
            for nc in conns:
                await nc.close()
    finally:
        secured.stop()


def test_natsd_nodes_get_their_credentials_before_the_server_starts(tmp_path: Path) -> None:
    """`python -m draflow.infra.natsd --nodes node-1,node-2` (the Procfile's line): the kubelets the
    Procfile runs find their credentials ready, so a first start reloads no server."""
    from draflow.infra.natsd import write_server_config

    settings = Settings(data_dir=tmp_path / "data")
    write_server_config(settings, nodes=("node-1", "node-2"))
    conf = (settings.data_dir / "nats" / "accounts.conf").read_text()
    for node in ("node-1", "node-2"):
        assert creds_path(settings, f"kubelet-{node}").is_file()
        assert f"draflow.node.{node}.*" in conf
    assert not creds_path(settings, "kubelet-node-3").exists()
