"""Users of the Kubernetes API with the real kubectl: ``draflow token create`` hands out a
kubeconfig, the user's groups decide what they may do (403 as upstream), their writes name them
as the actor in the log, and a revoked token stops working at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from draflow.infra.config import Settings
from draflow.services.apiserver.server import ApiServer
from draflow.services.cli.main import main as draflow
from tests.services.apiserver.kubeapi.conftest import Kube, http, kubectl

POD = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10}]
"""
CLASS = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors: [{cel: {expression: "device.driver == 'gpu.example.com'"}}]
"""


def _create(settings: Settings, user: str, *groups: str, capsys: pytest.CaptureFixture[str]) -> Path:
    args = ["token", "create", user, "--data-dir", str(settings.data_dir)]
    for g in groups:
        args += ["--group", g]
    assert draflow(args) == 0
    out = capsys.readouterr().out
    path = Path(out.split("kubeconfig: ", 1)[1].strip())
    assert path == settings.data_dir / "kubeconfigs" / f"{user}.yaml"
    assert path.stat().st_mode & 0o777 == 0o600
    return path


async def test_a_viewer_reads_and_is_refused_writes(
    kube: Kube, apiserver: ApiServer, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    alice = _create(settings, "alice", capsys=capsys)  # default: draflow:view
    who = (await kubectl(kube, "auth", "whoami", "-o", "json", kubeconfig=alice)).json()
    assert who["status"]["userInfo"]["username"] == "alice"
    assert who["status"]["userInfo"]["groups"] == ["draflow:view", "system:authenticated"]
    table = (await kubectl(kube, "auth", "whoami", kubeconfig=alice)).out.splitlines()
    assert [line.split() for line in table] == [
        ["ATTRIBUTE", "VALUE"],
        ["Username", "alice"],
        ["UID", who["status"]["userInfo"]["uid"]],
        ["Groups", "[draflow:view", "system:authenticated]"],
    ]
    assert (await kubectl(kube, "get", "pods", "-A", "-o", "json", kubeconfig=alice)).json()["items"] == []
    await kubectl(kube, "api-resources", kubeconfig=alice)  # discovery: every user's

    before = apiserver.store.position
    refused = await kubectl(kube, "apply", "-f", "-", stdin=POD, check=False, kubeconfig=alice)
    assert refused.rc == 1
    assert (
        'pods is forbidden: User "alice" cannot create resource "pods" in API group "" '
        'in the namespace "default"' in refused.err
    ), refused.err
    assert "Error from server (Forbidden)" in refused.err
    assert apiserver.store.position == before  # nothing appended

    # the Status itself, as upstream's
    token = _token(alice)
    code, body = await http(kube, "DELETE", "/api/v1/namespaces/default/pods/web", token=token)
    status = json.loads(body)
    assert code == 403 and status["reason"] == "Forbidden" and status["code"] == 403
    assert status["details"] == {"name": "web", "kind": "pods"}
    assert status["message"] == (
        'pods "web" is forbidden: User "alice" cannot delete resource "pods" in API group "" '
        'in the namespace "default"'
    )

    can = await kubectl(kube, "auth", "can-i", "create", "pods", check=False, kubeconfig=alice)
    assert (can.rc, can.out.strip()) == (1, "no")
    can = await kubectl(kube, "auth", "can-i", "watch", "resourceclaims", kubeconfig=alice)
    assert can.out.strip() == "yes"
    admin_can = await kubectl(kube, "auth", "can-i", "create", "deviceclasses")
    assert admin_can.out.strip() == "yes"


async def test_an_editor_writes_in_a_namespace_as_itself(
    kube: Kube, apiserver: ApiServer, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    bob = _create(settings, "bob", "draflow:edit", capsys=capsys)
    await kubectl(kube, "apply", "-f", "-", stdin=POD, kubeconfig=bob)
    # the log names the user as the actor of the events the write appended
    last = await apiserver.events.last(apiserver.store.subject("Pod", "default", "web"))
    assert last is not None and last.actor == "user:bob"
    await kubectl(kube, "label", "pod", "web", "tier=front", kubeconfig=bob)
    last = await apiserver.events.last(apiserver.store.subject("Pod", "default", "web"))
    assert last is not None and last.actor == "user:bob"

    # status is what the controllers and kubelets report: not an editor's to write
    status = await kubectl(
        kube,
        "patch",
        "pod",
        "web",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"phase":"Running"}}',
        check=False,
        kubeconfig=bob,
    )
    assert 'User "bob" cannot patch resource "pods/status" in API group ""' in status.err, status.err
    refused = await kubectl(kube, "apply", "-f", "-", stdin=CLASS, check=False, kubeconfig=bob)
    assert refused.rc == 1
    assert (
        'deviceclasses.resource.k8s.io is forbidden: User "bob" cannot create resource "deviceclasses" '
        'in API group "resource.k8s.io" at the cluster scope'
    ) in refused.err, refused.err
    # the admin may, and its writes are the admin's
    await kubectl(kube, "apply", "-f", "-", stdin=CLASS)
    last = await apiserver.events.last(apiserver.store.subject("DeviceClass", "", "gpu.example.com"))
    assert last is not None and last.actor == "user:admin"


async def test_a_revoked_token_stops_working_at_once(
    kube: Kube, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    carol = _create(settings, "carol", capsys=capsys)
    await kubectl(kube, "get", "nodes", kubeconfig=carol)
    assert draflow(["token", "list", "--data-dir", str(settings.data_dir)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split() == ["USER", "UID", "GROUPS"]
    assert [line.split()[0] for line in listed[1:]] == ["admin", "carol"]
    assert _token(carol) not in "\n".join(listed)  # tokens are not printed

    token = _token(carol)
    assert draflow(["token", "revoke", "carol", "--data-dir", str(settings.data_dir)]) == 0
    assert not carol.exists()
    code, body = await http(kube, "GET", "/api/v1/nodes", token=token)
    assert code == 401 and json.loads(body)["reason"] == "Unauthorized"
    # a second create of an existing user and revoking the admin are refused with a message
    _create(settings, "dave", capsys=capsys)
    assert draflow(["token", "create", "dave", "--data-dir", str(settings.data_dir)]) == 1
    assert 'user "dave" already has a token' in capsys.readouterr().err
    assert draflow(["token", "revoke", "admin", "--data-dir", str(settings.data_dir)]) == 1
    assert "administrator" in capsys.readouterr().err


def _token(kubeconfig: Path) -> str:
    import yaml

    token: str = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    return token


async def test_the_admin_checks_a_users_rights_by_impersonation(
    kube: Kube, apiserver: ApiServer, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kubectl --as``: the masters may act as someone else (decided with that user's rights, the
    log names both); anyone else asking is refused as upstream."""
    erin = _create(settings, "erin", capsys=capsys)
    who = (await kubectl(kube, "auth", "whoami", "--as=erin", "--as-group=draflow:view", "-o", "json")).json()
    assert who["status"]["userInfo"]["username"] == "erin"
    assert who["status"]["userInfo"]["groups"] == ["draflow:view", "system:authenticated"]
    as_viewer = await kubectl(
        kube, "apply", "-f", "-", "--as=erin", "--as-group=draflow:view", stdin=POD, check=False
    )
    assert 'User "erin" cannot create resource "pods"' in as_viewer.err, as_viewer.err
    await kubectl(kube, "apply", "-f", "-", "--as=erin", "--as-group=draflow:edit", stdin=POD)
    last = await apiserver.events.last(apiserver.store.subject("Pod", "default", "web"))
    assert last is not None and last.actor == "user:admin as erin"

    refused = await kubectl(kube, "get", "pods", "--as=admin", check=False, kubeconfig=erin)
    assert refused.rc == 1
    assert (
        'users "admin" is forbidden: User "erin" cannot impersonate resource "users" in API group "" '
        "at the cluster scope"
    ) in refused.err, refused.err
