"""A client generated from upstream's own released ``api.proto`` asks a running draflow kubelet.

Upstream's file is not part of this repository. Point ``DRAFLOW_UPSTREAM_PODRESOURCES_PROTO`` at a
copy of ``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`` to run this test: it compiles that
file with grpcio-tools into a temporary directory, and a separate Python process (upstream's
messages in their own default descriptor pool) calls ``List``, ``Get`` and
``GetAllocatableResources`` on the kubelet's socket through the generated stub. Without the
variable the test is skipped (CI installs only from PyPI); ``test_wire.py`` covers the field numbers
everywhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from draflow.infra.natsd import LocalNatsServer
from tests.helpers import wait_for
from tests.paths import ROOT
from tests.services.kubelet.podresources.cluster import (
    allocatable,
    cluster,
    get_pod,
    list_pods,
    running,
    short_settings,
    socket_of,
)
from tests.shells import manifests

pytestmark = pytest.mark.kep3695

UPSTREAM = os.environ.get("DRAFLOW_UPSTREAM_PODRESOURCES_PROTO", "")

CLIENT = """
import json, sys
import grpc
from google.protobuf import json_format
import api_pb2, api_pb2_grpc

with grpc.insecure_channel("unix:" + sys.argv[1]) as channel:
    stub = api_pb2_grpc.PodResourcesListerStub(channel)
    out = {
        "list": json_format.MessageToDict(stub.List(api_pb2.ListPodResourcesRequest(), timeout=10)),
        "get": json_format.MessageToDict(
            stub.Get(api_pb2.GetPodResourcesRequest(pod_name="pod0", pod_namespace=sys.argv[2]), timeout=10)
        ),
        "allocatable": json_format.MessageToDict(
            stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=10)
        ),
    }
    try:
        stub.Get(api_pb2.GetPodResourcesRequest(pod_name="nope", pod_namespace=sys.argv[2]), timeout=10)
    except grpc.RpcError as exc:
        out["error"] = [exc.code().name, exc.details()]
print(json.dumps(out))
"""


EXAMPLE = ROOT / "examples" / "dra-example-driver"


def _prepare(tmp_path: Path) -> list[dict[str, Any]]:
    """Compile upstream's file next to the client script; the manifests to apply."""
    from grpc_tools import protoc

    (tmp_path / "api.proto").write_bytes(Path(UPSTREAM).read_bytes())
    args = [
        "protoc",
        f"-I{tmp_path}",
        f"--python_out={tmp_path}",
        f"--grpc_python_out={tmp_path}",
        "api.proto",
    ]
    assert protoc.main(args) == 0
    (tmp_path / "client.py").write_text(CLIENT)
    return manifests((EXAMPLE / "basic-resourceclaimtemplate--basic-resourceclaimtemplate.yaml").read_text())


@pytest.mark.skipif(not UPSTREAM, reason="DRAFLOW_UPSTREAM_PODRESOURCES_PROTO (upstream's api.proto) not set")
async def test_client_from_upstreams_proto(nats_server: LocalNatsServer, tmp_path: Path) -> None:
    docs = _prepare(tmp_path)
    ns = "basic-resourceclaimtemplate"
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "legacy", "namespace": ns},
            "spec": {
                "containers": [
                    {"name": "c", "image": "busybox", "resources": {"limits": {"example.com/gpu": 1}}}
                ]
            },
        }
    )
    settings = short_settings(nats_server)
    async with cluster(settings) as (probe, _procs):
        for result in await probe.api.apply(docs):
            assert result.error is None, result.error
        for name in ("pod0", "pod1", "legacy"):
            await wait_for(running(probe, ns, name), 90, f"{name} Running")
        socket = socket_of(settings)
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(tmp_path / "client.py"), str(socket), ns],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        assert seen["list"] == json_format.MessageToDict(await list_pods(socket))
        assert seen["get"] == json_format.MessageToDict(await get_pod(socket, ns, "pod0"))
        assert seen["allocatable"] == json_format.MessageToDict(await allocatable(socket))
        assert seen["error"] == ["NOT_FOUND", f"pod nope in namespace {ns} not found"]
        claims = [
            c for p in seen["list"]["podResources"] for c in p["containers"][0].get("dynamicResources", [])
        ]
        assert len(claims) == 2 and all(c["claimResources"][0]["cdiDevices"] for c in claims)
        print(json.dumps(seen["list"], indent=1))
