"""Wire compatibility both ways with code generated from upstream's own released protos.

Upstream's files are not part of this repository. Point ``DRAFLOW_UPSTREAM_KUBELET_PROTOS`` at a
directory holding copies of ``k8s.io/kubelet/pkg/apis``' ``pluginregistration/v1/api.proto`` and
``dra/v1/api.proto`` (``.ci/run`` fetches them at a pinned commit when it can) to run these tests:
they compile those files with grpcio-tools into a temporary directory (gogoproto options, which
only rename Go fields, are dropped first) and run, in a separate Python process (upstream's
messages in their own descriptor pool: the package names are the same as ours),

* a kubelet built from upstream's stubs against draflow's plugin library: GetInfo,
  NotifyRegistrationStatus, NodePrepareResources / NodeUnprepareResources on the advertised endpoint;
* a plugin built from upstream's stubs, which draflow's kubelet side (watcher, registry, client)
  registers and calls.

Without the variable they are skipped; ``tests/services/runtime/kubeletapi/test_generated.py``
checks the names and field numbers everywhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers.gpu_example import GpuExamplePlugin
from draflow.services.drivers.kubeletplugin.server import PluginServer
from draflow.services.kubelet.plugins.registry import PluginRegistry
from draflow.services.kubelet.plugins.watcher import RegistrationWatcher
from draflow.services.runtime.kubeletapi import sockets
from tests.builders import make_allocation, make_claim

pytestmark = [
    pytest.mark.kep4381,
    pytest.mark.skipif(
        not os.environ.get("DRAFLOW_UPSTREAM_KUBELET_PROTOS"),
        reason="upstream's released protos are never committed: .ci/run fetches them at pinned commits "
        "into DRAFLOW_UPSTREAM_KUBELET_PROTOS (unset here, e.g. offline)",
    ),
]

UPSTREAM = Path(os.environ.get("DRAFLOW_UPSTREAM_KUBELET_PROTOS", "."))
PROTOS = ("pluginregistration/v1/api.proto", "dra/v1/api.proto")

KUBELET = """
import json, sys
import grpc
from pluginregistration.v1 import api_pb2 as reg, api_pb2_grpc as reg_grpc
from dra.v1 import api_pb2 as dra, api_pb2_grpc as dra_grpc

with grpc.insecure_channel("unix:" + sys.argv[1]) as channel:
    stub = reg_grpc.RegistrationStub(channel)
    info = stub.GetInfo(reg.InfoRequest(), timeout=10)
    stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=10)
claim = dra.Claim(namespace="default", uid=sys.argv[3], name=sys.argv[4])
with grpc.insecure_channel("unix:" + sys.argv[2]) as channel:
    stub = dra_grpc.DRAPluginStub(channel)
    prepared = stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[claim]), timeout=10)
    unprepared = stub.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=[claim]), timeout=10)
out = {
    "info": [info.type, info.name, info.endpoint, list(info.supported_versions)],
    "devices": [
        [list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids)]
        for d in prepared.claims[sys.argv[3]].devices
    ],
    "error": prepared.claims[sys.argv[3]].error,
    "unprepared": {uid: r.error for uid, r in unprepared.claims.items()},
}
print(json.dumps(out), flush=True)
"""

PLUGIN = """
import json, sys, time, os
from concurrent import futures
import grpc
from pluginregistration.v1 import api_pb2 as reg, api_pb2_grpc as reg_grpc
from dra.v1 import api_pb2 as dra, api_pb2_grpc as dra_grpc

registration_socket, endpoint = sys.argv[1], sys.argv[2]
heard = []

class Registration(reg_grpc.RegistrationServicer):
    def GetInfo(self, request, context):
        return reg.PluginInfo(
            type="DRAPlugin", name="upstream.example.com", endpoint=endpoint,
            supported_versions=["v1.DRAPlugin"],
        )

    def NotifyRegistrationStatus(self, request, context):
        print(json.dumps({"registered": request.plugin_registered, "error": request.error}), flush=True)
        return reg.RegistrationStatusResponse()

class Node(dra_grpc.DRAPluginServicer):
    def NodePrepareResources(self, request, context):
        out = dra.NodePrepareResourcesResponse()
        for c in request.claims:
            if c.name == "broken":
                out.claims[c.uid].error = "cannot prepare " + c.namespace + "/" + c.name
            else:
                out.claims[c.uid].devices.add(
                    request_names=["gpu"], pool_name="pool-" + c.namespace, device_name="dev-" + c.name,
                    cdi_device_ids=["upstream.example.com/gpu=" + c.uid],
                )
        return out

    def NodeUnprepareResources(self, request, context):
        out = dra.NodeUnprepareResourcesResponse()
        for c in request.claims:
            out.claims[c.uid].error = ""
        return out

server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
reg_grpc.add_RegistrationServicer_to_server(Registration(), server)
dra_grpc.add_DRAPluginServicer_to_server(Node(), server)
server.add_insecure_port("unix:" + registration_socket)
server.add_insecure_port("unix:" + endpoint)
server.start()
print(json.dumps({"ready": True}), flush=True)
sys.stdin.read()
server.stop(0)
"""


def _compile(tmp: Path) -> Path:
    """Upstream's protos, compiled where the scripts import them (``pluginregistration.v1``, ``dra.v1``)."""
    from grpc_tools import protoc

    out = tmp / "upstream"
    for rel in PROTOS:
        text = (UPSTREAM / rel).read_text()
        text = re.sub(r'import "github.com/gogo/protobuf/gogoproto/gogo.proto";\n', "", text)
        text = re.sub(r"\s*\[\(gogoproto\.[^\]]*\]", "", text)
        text = re.sub(r"option \(gogoproto\.[^;]*;\n", "", text)
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        for d in (target.parent, target.parent.parent):
            (d / "__init__.py").touch()
        assert (
            protoc.main(["protoc", f"-I{out}", f"--python_out={out}", f"--grpc_python_out={out}", rel]) == 0
        )
    return out


async def test_a_kubelet_from_upstreams_protos_calls_our_plugin(tmp_path: Path) -> None:
    compiled = _compile(tmp_path)
    (compiled / "kubelet.py").write_text(KUBELET)
    claim = make_claim("a", allocation=make_allocation(("gpu", "gpu-2"), pool="node-1"))
    claims = {claim.metadata.uid: claim}
    driver = GpuExamplePlugin("node-1", tmp_path / "cdi", lambda ref: claims.get(ref.uid))
    plugin = PluginServer(
        driver,
        registry_dir=sockets.registry_dir(tmp_path, "n"),
        plugins_dir=sockets.plugins_dir(tmp_path, "n"),
        versions=("v1.DRAPlugin", "v1beta1.DRAPlugin"),
    )
    await plugin.start()
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable,
                "kubelet.py",
                sockets.dial_address(plugin.registration_path).removeprefix("unix:"),
                sockets.dial_address(plugin.endpoint).removeprefix("unix:"),
                claim.metadata.uid,
                "a",
            ],
            cwd=compiled,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        assert seen["info"] == [
            "DRAPlugin",
            "gpu.example.com",
            str(plugin.endpoint),
            ["v1.DRAPlugin", "v1beta1.DRAPlugin"],
        ]
        uid = claim.metadata.uid
        assert seen["devices"] == [
            [
                ["gpu"],
                "node-1",
                "gpu-2",
                ["k8s.gpu.example.com/gpu=common", f"k8s.gpu.example.com/gpu={uid}-gpu-2"],
            ]
        ]
        assert seen["error"] == "" and seen["unprepared"] == {uid: ""}
        assert plugin.registered.is_set()
    finally:
        await plugin.stop()


async def test_our_kubelet_registers_and_calls_a_plugin_from_upstreams_protos(tmp_path: Path) -> None:
    compiled = _compile(tmp_path)
    (compiled / "plugin.py").write_text(PLUGIN)
    short = Path(tempfile.mkdtemp(prefix="up-", dir="/tmp"))  # unix socket paths: 107 bytes at most
    registry_dir = sockets.registry_dir(short, "n")
    registry_dir.mkdir(parents=True)
    reg_socket = registry_dir / "upstream.example.com-reg.sock"
    endpoint = short / "dra.sock"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "plugin.py",
        str(reg_socket),
        str(endpoint),
        cwd=compiled,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    registry = PluginRegistry()
    watcher = RegistrationWatcher(registry_dir, registry)
    try:
        assert proc.stdout is not None
        assert json.loads(await proc.stdout.readline()) == {"ready": True}
        await watcher.scan()
        (instance,) = registry.instances()
        assert (instance.driver, instance.service, instance.endpoint) == (
            "upstream.example.com",
            "v1.DRAPlugin",
            str(endpoint),
        )
        assert json.loads(await proc.stdout.readline()) == {"registered": True, "error": ""}
        good = ClaimRef(namespace="ns", uid="uid-1", name="good")
        broken = ClaimRef(namespace="ns", uid="uid-2", name="broken")
        results = await registry["upstream.example.com"].node_prepare_resources([good, broken])
        (device,) = results["uid-1"].devices
        assert (device.request_names, device.pool_name, device.device_name, device.cdi_device_ids) == (
            ("gpu",),
            "pool-ns",
            "dev-good",
            ("upstream.example.com/gpu=uid-1",),
        )
        assert results["uid-2"].error == "cannot prepare ns/broken" and results["uid-2"].devices == ()
        assert await registry["upstream.example.com"].node_unprepare_resources([good]) == {"uid-1": None}
    finally:
        for i in registry.instances():
            await i.client.close()
        await proc.communicate(b"")
        shutil.rmtree(short, ignore_errors=True)
