"""The PodResources API of a real kubelet process, over its real socket, with the real services.

One cluster (``cluster.py``) runs every case the KEP and the issue name, each in its own namespace:
a one-GPU pod from a template (dra-example-driver's example, verbatim), a claim shared by two pods,
one claim used by two containers, a sidecar and an ordinary init container, a container using one
request of a two-request claim, an extended-resource pod (KEP-5004), a classic pod (KEP-3063) and a
device-plugin pod. ``List``, ``Get`` and ``GetAllocatableResources`` are checked against the claims'
allocations and the CDI ids the kubelet recorded; a deleted pod leaves ``List``; ``Get`` errors,
metrics and the ``draflow podresources`` CLI are checked on the same cluster.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import grpc

from events.api.resource_v1 import ResourceClaim
from events.dra import PodResourcesPrepared
from infra.natsd import LocalNatsServer
from services.runtime.controller import Runtime
from tests.controllers.shells import manifests
from tests.e2e.procs import ROOT
from tests.e2e.test_demo import wait_for
from tests.podresources.cluster import (
    NODE,
    allocatable,
    by_pod,
    cluster,
    containers,
    devices_of,
    get_pod,
    list_pods,
    rpc_error,
    running,
    short_settings,
    socket_of,
)

EXAMPLES = ROOT / "examples" / "dra-example-driver"
CASES = """
apiVersion: v1
kind: Namespace
metadata: {name: pr}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: pr}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.example.com}
---
apiVersion: v1
kind: Pod
metadata: {name: sidecars, namespace: pr}
spec:
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: one-gpu}
  initContainers:
  - {name: init, image: busybox, resources: {claims: [{name: gpu}]}}
  - {name: sidecar, image: busybox, restartPolicy: Always, resources: {claims: [{name: gpu}]}}
  containers:
  - {name: a, image: busybox, resources: {claims: [{name: gpu}]}}
  - {name: b, image: busybox, resources: {claims: [{name: gpu}]}}
  - {name: none, image: busybox}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: two, namespace: pr}
spec:
  devices:
    requests:
    - name: first
      exactly: {deviceClassName: gpu.example.com}
    - name: second
      exactly: {deviceClassName: gpu.example.com}
---
apiVersion: v1
kind: Pod
metadata: {name: two-requests, namespace: pr}
spec:
  resourceClaims:
  - {name: two, resourceClaimName: two}
  containers:
  - {name: first, image: busybox, resources: {claims: [{name: two, request: first}]}}
  - {name: second, image: busybox, resources: {claims: [{name: two, request: second}]}}
  - {name: both, image: busybox, resources: {claims: [{name: two}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: extended, namespace: pr}
spec:
  containers:
  - name: ctr
    image: busybox
    resources:
      limits: {deviceclass.resource.kubernetes.io/gpu.example.com: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: device-plugin, namespace: pr}
spec:
  containers:
  - {name: ctr, image: busybox, resources: {limits: {example.com/gpu: 1}}}
"""


def _apply_files() -> list[dict[str, Any]]:
    docs = manifests(CASES)
    for name in (
        "basic-resourceclaimtemplate--basic-resourceclaimtemplate.yaml",
        "basic-shared-claim-across-pods--basic-shared-claim-across-pods.yaml",
    ):
        docs += manifests((EXAMPLES / name).read_text())
    classic = ROOT / "examples" / "classic"
    docs += manifests((classic / "fpga-resourceclass.yaml").read_text())
    docs += manifests((classic / "fpga-inline-pod.yaml").read_text())
    return docs


PODS = [
    ("basic-resourceclaimtemplate", "pod0"),
    ("basic-resourceclaimtemplate", "pod1"),
    ("basic-shared-claim-across-pods", "pod0"),
    ("basic-shared-claim-across-pods", "pod1"),
    ("pr", "sidecars"),
    ("pr", "two-requests"),
    ("pr", "extended"),
    ("pr", "device-plugin"),
    ("default", "fpga-job"),
]


def _claim(probe: Runtime, ns: str, name: str) -> ResourceClaim:
    claim = probe.get("ResourceClaim", ns, name)
    assert isinstance(claim, ResourceClaim) and claim.status.allocation is not None, name
    return claim


def _pod_claim(probe: Runtime, ns: str, pod: str) -> ResourceClaim:
    status = probe.get("Pod", ns, pod).status.resource_claim_statuses[0]
    return _claim(probe, ns, status.resource_claim_name)


def _expected(claim: ResourceClaim, requests: tuple[str, ...] = ()) -> list[tuple[str, str, str, list[str]]]:
    """driver/pool/device and the CDI ids gpu.example.com's prepare returns for each device."""
    assert claim.status.allocation is not None
    return [
        (
            r.driver,
            r.pool,
            r.device,
            ["k8s.gpu.example.com/gpu=common", f"k8s.gpu.example.com/gpu={claim.metadata.uid}-{r.device}"],
        )
        for r in claim.status.allocation.devices.results
        if not requests or r.request in requests
    ]


async def _recorded_cdi(probe: Runtime, ns: str, name: str) -> dict[str, list[str]]:
    for env in await probe.events.events(probe.events.subject("Pod", ns, name)):
        if isinstance(env.data, PodResourcesPrepared):
            return {c.container: list(c.cdi_ids) for c in env.data.containers}
    raise AssertionError(f"{ns}/{name} not prepared")


def _draflow(settings: Any, *args: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    from tests.e2e.procs import service_env

    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "podresources", *args],
        cwd=ROOT,
        env=service_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout, done.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("kubelet_pod_resources_endpoint_"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


async def test_podresources_of_every_kind_of_pod(nats_server: LocalNatsServer) -> None:
    settings = short_settings(nats_server)
    port = _free_port()
    async with cluster(settings, "--metrics-port", str(port)) as (probe, _procs):
        socket = socket_of(settings)
        before = _metrics(port)
        assert socket.stat().st_mode & 0o777 == 0o600
        for result in await probe.api.apply(_apply_files()):
            assert result.error is None, result.error
        for ns, name in PODS:
            await wait_for(running(probe, ns, name), 90, f"{ns}/{name} Running")

        listed = by_pod(await list_pods(socket))
        assert sorted(listed) == sorted(PODS)

        # one GPU from a template: the claim's device and the CDI ids its prepare returned
        for pod in ("pod0", "pod1"):
            (ctr,) = listed[("basic-resourceclaimtemplate", pod)].containers
            claim = _pod_claim(probe, "basic-resourceclaimtemplate", pod)
            (dyn,) = ctr.dynamic_resources
            assert (ctr.name, dyn.claim_name, dyn.claim_namespace) == (
                "ctr0",
                claim.metadata.name,
                claim.metadata.namespace,
            )
            assert devices_of(dyn) == _expected(claim) and len(_expected(claim)) == 1
            assert list(ctr.devices) == []
            recorded = await _recorded_cdi(probe, "basic-resourceclaimtemplate", pod)
            assert [n for r in dyn.claim_resources for n in (d.name for d in r.cdi_devices)] == recorded[
                "ctr0"
            ]

        # a claim shared by two pods: both report the same device
        shared = _claim(probe, "basic-shared-claim-across-pods", "single-gpu")
        for pod in ("pod0", "pod1"):
            (ctr,) = listed[("basic-shared-claim-across-pods", pod)].containers
            (dyn,) = ctr.dynamic_resources
            assert dyn.claim_name == "single-gpu" and devices_of(dyn) == _expected(shared)

        # one claim, two containers and a sidecar (restartable init container); the ordinary init
        # container has finished before the pod runs and is not reported (as upstream)
        side = containers(listed[("pr", "sidecars")])
        assert list(side) == ["sidecar", "a", "b", "none"]
        claim = _pod_claim(probe, "pr", "sidecars")
        for name in ("sidecar", "a", "b"):
            (dyn,) = side[name].dynamic_resources
            assert dyn.claim_name == claim.metadata.name and devices_of(dyn) == _expected(claim)
        assert list(side["none"].dynamic_resources) == []

        # one request of a two-request claim: only that request's device; no request: both
        two = _claim(probe, "pr", "two")
        reqs = containers(listed[("pr", "two-requests")])
        assert devices_of(reqs["first"].dynamic_resources[0]) == _expected(two, ("first",))
        assert devices_of(reqs["second"].dynamic_resources[0]) == _expected(two, ("second",))
        assert devices_of(reqs["both"].dynamic_resources[0]) == _expected(two)
        assert len(_expected(two)) == 2 and _expected(two, ("first",)) != _expected(two, ("second",))

        # the extended-resource pod: its special claim through the request mapping
        ext = probe.get("Pod", "pr", "extended").status.extended_resource_claim_status
        special = _claim(probe, "pr", ext.resource_claim_name)
        (dyn,) = listed[("pr", "extended")].containers[0].dynamic_resources
        assert dyn.claim_name == special.metadata.name and devices_of(dyn) == _expected(special)

        # the classic pod: the FPGA its node plugin prepared, with the CDI name it returned
        (ctr,) = listed[("default", "fpga-job")].containers
        (dyn,) = ctr.dynamic_resources
        fpga = probe.get("ClassicResourceClaim", "default", "fpga-job-fpga")
        ((driver, _pool, _device, cdi),) = devices_of(dyn)
        assert (dyn.claim_name, driver) == ("fpga-job-fpga", "fpga.example.com")
        assert cdi == [f"fpga.example.com/fpga={fpga.metadata.uid}"]
        assert cdi == (await _recorded_cdi(probe, "default", "fpga-job"))["inference"]

        # the device-plugin pod: a device id of its own, which is also a CDI device of the plugin
        (ctr,) = listed[("pr", "device-plugin")].containers
        ((resource, ids),) = [(d.resource_name, list(d.device_ids)) for d in ctr.devices]
        assert resource == "example.com/gpu" and ids in (["gpu-0"], ["gpu-1"])
        assert (await _recorded_cdi(probe, "pr", "device-plugin"))["ctr"] == [f"example.com/gpu={ids[0]}"]
        spec = json.loads((settings.data_dir / "cdi" / NODE / "example.com-gpu.json").read_text())
        assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]

        # Get: the same as List for one pod; errors as the kubelet words them
        for ns, name in PODS:
            got = await get_pod(socket, ns, name)
            assert got.pod_resources == listed[(ns, name)]
        err = await rpc_error(get_pod(socket, "pr", "nope"))
        assert (err.code(), err.details()) == (
            grpc.StatusCode.NOT_FOUND,
            "pod nope in namespace pr not found",
        )
        err = await rpc_error(get_pod(socket, "pr", ""))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT

        # GetAllocatableResources: the device plugin's devices (DRA devices are not reported)
        alloc = await allocatable(socket)
        assert [(d.resource_name, list(d.device_ids)) for d in alloc.devices] == [
            ("example.com/gpu", ["gpu-0", "gpu-1"])
        ]

        # the CLI is a real client of the same socket
        code, out, err_text = await asyncio.to_thread(_draflow, settings, "list", "--node", NODE)
        assert code == 0, err_text
        lines = out.splitlines()
        assert lines[0].split() == ["NAMESPACE", "POD", "CONTAINER", "CLAIM", "DRIVER/POOL/DEVICE", "CDI"]
        ((gpu0,),) = [
            devices_of(listed[("basic-resourceclaimtemplate", "pod0")].containers[0].dynamic_resources[0])
        ]
        row = next(
            r for r in (line.split() for line in lines) if r[:2] == ["basic-resourceclaimtemplate", "pod0"]
        )
        assert row[3:] == [
            _pod_claim(probe, "basic-resourceclaimtemplate", "pod0").metadata.name,
            f"{gpu0[0]}/{gpu0[1]}/{gpu0[2]}",
            ",".join(gpu0[3]),
        ]
        assert any(
            line.split()[1:] == ["device-plugin", "ctr", "example.com/gpu", ids[0], "<none>"]
            for line in lines
        )
        code, out, _ = await asyncio.to_thread(
            _draflow, settings, "get", "sidecars", "-n", "pr", "--node", NODE, "-o", "json"
        )
        assert code == 0 and json.loads(out)["podResources"]["name"] == "sidecars"
        code, out, err_text = await asyncio.to_thread(
            _draflow, settings, "get", "nope", "-n", "pr", "--node", NODE
        )
        assert (code, out) == (1, "")
        assert (
            err_text.strip() == "error: rpc error: code = NotFound desc = pod nope in namespace pr not found"
        )
        code, out, _ = await asyncio.to_thread(_draflow, settings, "allocatable", "--node", NODE)
        assert out.splitlines() == ["RESOURCE          DEVICE IDS", "example.com/gpu   gpu-0,gpu-1"]

        # the kubelet's metrics, named as upstream's (the CLI's calls above count too)
        counted = _metrics(port)
        v1 = '{server_api_version="v1"}'

        def delta(name: str) -> float:
            key = f"kubelet_pod_resources_endpoint_{name}{v1}"
            return counted.get(key, 0.0) - before.get(key, 0.0)

        assert delta("requests_list") == 2 and delta("requests_get") == len(PODS) + 4
        assert delta("errors_get") == 3 and delta("requests_get_allocatable") == 2
        assert delta("requests_total") == 2 + len(PODS) + 4 + 2 and delta("errors_list") == 0

        # a deleted pod leaves List (once its kubelet released it); its device-plugin device is free
        (result,) = await probe.api.delete([("Pod", "pr", "device-plugin")])
        assert result.error is None
        await wait_for(lambda: probe.get("Pod", "pr", "device-plugin") is None or [], 60, "pod gone")
        after = by_pod(await list_pods(socket))
        assert sorted(after) == sorted(p for p in PODS if p != ("pr", "device-plugin"))
        assert after[("pr", "sidecars")] == listed[("pr", "sidecars")]
