"""Drivers as real kubelet plugins, end to end: every process real, the plugins driven from outside.

A kubelet for ``node-1`` and the gpu.example.com kubelet plugin as separate processes (as the
Procfile runs them), talking over the plugin registration and DRA gRPC sockets. The plugin's admin
endpoint makes it fail on demand, as upstream's e2e test driver does; plugins are killed,
restarted and replaced while pods use them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import yaml

from draflow.events.api.core_v1 import Pod
from draflow.events.dra import PodStarted
from draflow.infra.config import Settings
from draflow.infra.natsd import LocalNatsServer
from draflow.services.drivers.kubeletplugin.admin import admin_path, admin_request
from draflow.services.runtime.controller import Runtime
from draflow.services.runtime.kubeletapi import sockets
from tests.builders.manifests import gpu_template_yaml
from tests.conftest import settings_for
from tests.helpers import assert_eventually, wait_for
from tests.processes import GPU_PLUGIN, Proc, Service, node_services, stop_cleanly
from tests.shells import start_runtime

pytestmark = [pytest.mark.kep4381, pytest.mark.timeout(240)]

NODE = "node-1"
GPUS = 4
SERVICES: tuple[Service, ...] = (
    ("draflow.services.claim_controller", [], "claim-controller: following"),
    ("draflow.services.scheduler", [], None),
    ("draflow.services.drivers.gpu_example", [], "gpu-example-driver: publishing"),
    *node_services(NODE, GPUS)[:1],  # the kubelet; each test runs the plugins it needs
)


@pytest.fixture(scope="module")
def system(nats_server: LocalNatsServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    settings = settings_for(nats_server, tmp_path_factory.mktemp("plugins") / "data")
    procs = [Proc(settings, "draflow.services.apiserver")]
    try:
        procs[0].expect("apiserver: serving", 60)
        procs += [Proc(settings, module, args) for module, args, _ in SERVICES]
        for proc, (_, _, ready) in zip(procs[1:], SERVICES, strict=True):
            if ready:
                proc.expect(ready, 90)
        yield settings
    finally:
        asyncio.run(stop_cleanly(procs))


@pytest.fixture
async def probe(system: Settings) -> AsyncIterator[Runtime]:
    rt, events = await start_runtime(system, "e2e-probe")
    try:
        await wait_for(lambda: bool(rt.items("ResourceSlice")), 60, "node-1's slice")
        yield rt
    finally:
        await rt.stop()
        await events.close()


def start_plugin(settings: Settings, *args: str) -> Proc:
    proc = Proc(settings, GPU_PLUGIN, ["--node", NODE, "--gpus", str(GPUS), *args])
    proc.expect(f"gpu.example.com plugin on {NODE}: serving", 60)
    return proc


async def admin(settings: Settings, op: str, instance: str = "", **switches: Any) -> dict[str, Any]:
    path = admin_path(sockets.plugins_dir(settings.data_dir, NODE), "gpu.example.com", instance)
    request: dict[str, Any] = {"op": op, **({"switches": switches} if op == "set" else {})}
    answer = await admin_request(path, request)
    assert "error" not in answer, answer
    return answer


async def prepare_calls(settings: Settings, instance: str = "") -> int:
    return int((await admin(settings, "get", instance))["calls"]["prepare"])


async def prepare_calls_above(settings: Settings, n: int) -> bool:
    return await prepare_calls(settings) > n


async def gpu_pod(probe: Runtime, ns: str, name: str) -> None:
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        yaml.safe_load(gpu_template_yaml("one-gpu", ns)),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "containers": [
                    {"name": "ctr", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            },
        },
    ]
    for result in await probe.api.apply(docs):
        assert result.error is None, result.error


def phase(probe: Runtime, ns: str, name: str) -> str:
    pod = probe.get("Pod", ns, name)
    return pod.status.phase if isinstance(pod, Pod) else "gone"


async def running(probe: Runtime, ns: str, name: str, timeout_s: float = 60) -> None:
    await wait_for(lambda: phase(probe, ns, name) == "Running" or [phase(probe, ns, name)], timeout_s, name)


def warnings(probe: Runtime, ns: str, name: str) -> list[str]:
    return [
        e.message
        for e in probe.items("Event", ns)
        if e.reason == "FailedPrepareDynamicResources" and e.involved_object.name == name
    ]


async def starts(probe: Runtime, ns: str, name: str) -> int:
    subject = probe.events.subject("Pod", ns, name)
    return sum(isinstance(e.data, PodStarted) for e in await probe.events.events(subject))


async def delete_namespace(probe: Runtime, ns: str) -> None:
    await probe.api.delete([("Namespace", "", ns)])
    await wait_for(
        lambda: not (probe.items("Pod", ns) or probe.items("ResourceClaim", ns)), 60, f"{ns} cleaned up"
    )


@pytest.mark.upstream_e2e("must retry NodePrepareResources")
async def test_prepare_failing_on_demand_keeps_the_pod_pending_until_cleared(
    system: Settings, probe: Runtime
) -> None:
    """Upstream: ``It("must retry NodePrepareResources")``, across the gRPC boundary. The plugin
    fails NodePrepareResources for the pod's claim (its admin endpoint): the pod stays
    Pending with FailedPrepareDynamicResources Warnings while the kubelet keeps asking; once the
    failure is cleared it runs."""
    plugin = start_plugin(system)
    try:
        await admin(system, "set", fail_prepare_calls=1000)
        await gpu_pod(probe, "fails", "pod")
        await wait_for(lambda: len(warnings(probe, "fails", "pod")) >= 1 or [], 30, "warned")
        asked = await prepare_calls(system)
        await assert_eventually(lambda: prepare_calls_above(system, asked), timeout_s=30)  # retried
        asked = await prepare_calls(system)
        assert phase(probe, "fails", "pod") == "Pending"
        (message, *_) = warnings(probe, "fails", "pod")
        assert message.startswith("Failed to prepare dynamic resources: NodePrepareResources: DRA driver")
        assert "injected failure" in message and asked >= 1
        await admin(system, "clear")
        await running(probe, "fails", "pod")
        assert (await admin(system, "get"))["calls"]["prepare"] > asked
        assert await starts(probe, "fails", "pod") == 1
        await delete_namespace(probe, "fails")
    finally:
        plugin.terminate()


async def test_a_plugin_killed_mid_prepare_is_retried_and_the_pod_starts_once(
    system: Settings, probe: Runtime
) -> None:
    """The plugin hangs in NodePrepareResources and is killed (SIGKILL) before answering; the
    kubelet's call fails, it retries with backoff, the restarted plugin (its checkpoint read back)
    registers again and prepares; the pod starts exactly once."""
    plugin = start_plugin(system)
    restarted: Proc | None = None
    try:
        await admin(system, "set", prepare_delay_s=30)
        await gpu_pod(probe, "killed", "pod")
        await assert_eventually(lambda: prepare_calls_above(system, 0), timeout_s=30)  # the call is in
        plugin.kill()
        await wait_for(
            lambda: len(warnings(probe, "killed", "pod")) >= 1 or [], 30, "the failed call reported"
        )
        assert phase(probe, "killed", "pod") == "Pending"
        restarted = start_plugin(system)
        await running(probe, "killed", "pod")
        assert await starts(probe, "killed", "pod") == 1
        claim = probe.items("ResourceClaim", "killed")[0]
        spec = system.data_dir / "cdi" / NODE / f"k8s.gpu.example.com-gpu_{claim.metadata.uid}.json"
        assert spec.exists()
        await delete_namespace(probe, "killed")
        assert not spec.exists()  # unprepared by the restarted plugin
    finally:
        for p in (plugin, restarted):
            if p is not None and p.proc.poll() is None:
                p.terminate()


async def test_a_plugin_replaced_during_a_prepare_is_retried_on_the_new_instance(
    system: Settings, probe: Runtime
) -> None:
    """A new plugin process binds the same sockets while the kubelet waits in the old one's
    NodePrepareResources (a restarted plugin's successor does the same): the watcher sees the
    re-created registration socket and closes the old instance's channel under the call. The
    kubelet takes that as a lost call and retries on the new instance; the pod starts once. grpc
    raises ``CancelledError`` for such a call, which used to end the kubelet's sync pass and the
    kubelet process with it (exit 0, nothing restarted it: the cluster chaos test's lost node)."""
    old = start_plugin(system)
    new: Proc | None = None
    try:
        await admin(system, "set", prepare_delay_s=30)
        await gpu_pod(probe, "replaced", "pod")
        await assert_eventually(lambda: prepare_calls_above(system, 0), timeout_s=30)  # the call is in
        new = start_plugin(system)  # the same registration, DRA and admin sockets, bound again
        await running(probe, "replaced", "pod")
        assert await starts(probe, "replaced", "pod") == 1
        assert await prepare_calls(system) == 1  # the new instance's (its admin socket now)
        await delete_namespace(probe, "replaced")
    finally:
        old.kill()  # not a clean stop: that would remove the sockets, which are the new instance's
        if new is not None and new.proc.poll() is None:
            new.terminate()


@pytest.mark.upstream_e2e("rolling update")
async def test_rolling_update_keeps_pods_running_and_new_pods_go_to_the_new_plugin(
    system: Settings, probe: Runtime
) -> None:
    """Upstream: ``It("rolling update")`` of a kubelet plugin: instance "b" registers beside "a" and takes the
    new calls; "a" leaves; the pod "a" prepared keeps running and is unprepared by "b"."""
    old = start_plugin(system, "--instance", "a")
    new: Proc | None = None
    try:
        await gpu_pod(probe, "rolling", "before")
        await running(probe, "rolling", "before")
        new = start_plugin(system, "--instance", "b")
        await asyncio.sleep(0.5)  # the kubelet's watcher sees "b" (it looks every 0.2 s)
        assert old.terminate() == 0  # the old instance deregisters and goes
        await gpu_pod(probe, "rolling2", "after")
        await running(probe, "rolling2", "after")
        assert phase(probe, "rolling", "before") == "Running"
        assert await prepare_calls(system, "b") == 1  # the new pod's claim, by the new instance
        await delete_namespace(probe, "rolling")
        await delete_namespace(probe, "rolling2")
        answer = await admin(system, "get", "b")
        assert answer["calls"]["unprepare"] == 2  # both pods' claims released by "b"
    finally:
        for p in (old, new):
            if p is not None and p.proc.poll() is None:
                p.terminate()


@pytest.mark.upstream_e2e("work", context="with multiple drivers (drapbv1beta1, drapbv1, both)")
async def test_two_drivers_on_one_node_one_v1_one_v1beta1(system: Settings, probe: Runtime) -> None:
    """Upstream: ``It("work")`` with multiple drivers of different API versions: gpu.example.com
    serves v1, the simulated gpu.nvidia.com only v1beta1 on the same node; a pod
    with a claim of each runs, both prepared through their own plugin in their own version."""
    gpu = start_plugin(system)
    nvidia = Proc(
        system,
        "draflow.services.drivers.nvidia_sim.node",
        ["--node", NODE, "--gpus", "1", "--dra-version", "v1beta1.DRAPlugin"],
    )
    try:
        nvidia.expect(f"gpu.nvidia.com plugin on {NODE}: serving v1beta1.DRAPlugin", 60)
        ns = "two-drivers"
        nvidia_template = yaml.safe_load(gpu_template_yaml("one-nvidia", ns))
        nvidia_template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nvidia-gpu"
        nvidia_class = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "nvidia-gpu"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "both", "namespace": ns},
            "spec": {
                "containers": [
                    {
                        "name": "ctr",
                        "image": "busybox",
                        "resources": {"claims": [{"name": "a"}, {"name": "b"}]},
                    }
                ],
                "resourceClaims": [
                    {"name": "a", "resourceClaimTemplateName": "one-gpu"},
                    {"name": "b", "resourceClaimTemplateName": "one-nvidia"},
                ],
            },
        }
        docs = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            nvidia_class,
            yaml.safe_load(gpu_template_yaml("one-gpu", ns)),
            nvidia_template,
            pod,
        ]
        for result in await probe.api.apply(docs):
            assert result.error is None, result.error
        await running(probe, ns, "both")
        cdi = {p.name for p in (system.data_dir / "cdi" / NODE).glob("*.json")}
        claims = {
            c.status.allocation.devices.results[0].driver: c.metadata.uid
            for c in probe.items("ResourceClaim", ns)
        }
        assert f"k8s.gpu.example.com-gpu_{claims['gpu.example.com']}.json" in cdi
        assert any(claims["gpu.nvidia.com"] in name for name in cdi)
        await delete_namespace(probe, ns)
        await probe.api.delete([("DeviceClass", "", "nvidia-gpu")])
    finally:
        for p in (nvidia, gpu):
            if p.proc.poll() is None:
                p.terminate()


@pytest.mark.upstream_e2e("runs pod after driver starts")
async def test_runs_pod_after_driver_starts(system: Settings, probe: Runtime) -> None:
    """Upstream: ``It("runs pod after driver starts")`` — the pod is bound while no plugin of its
    driver is registered on the node: it waits (Pending, the kubelet says why) and runs once the
    plugin process starts and registers."""
    await gpu_pod(probe, "late-driver", "pod")
    await wait_for(lambda: len(warnings(probe, "late-driver", "pod")) >= 1 or [], 30, "warned")
    (message, *_) = warnings(probe, "late-driver", "pod")
    assert "gpu.example.com" in message and "not registered" in message, message
    assert phase(probe, "late-driver", "pod") == "Pending"
    plugin = start_plugin(system)
    try:
        await running(probe, "late-driver", "pod")
        await delete_namespace(probe, "late-driver")
    finally:
        plugin.terminate()


@pytest.mark.upstream_e2e("failed update")
async def test_failed_update_leaves_the_old_instance_serving(system: Settings, probe: Runtime) -> None:
    """Upstream: ``It("failed update")`` — a new instance registers beside the old one and is torn
    down again; the kubelet goes back to the old instance and new pods run."""
    old = start_plugin(system, "--instance", "old")
    try:
        new = start_plugin(system, "--instance", "new")
        await asyncio.sleep(0.5)  # registered (the watcher looks every 0.2 s)
        new.kill()
        path = sockets.registration_socket(
            sockets.registry_dir(system.data_dir, NODE), "gpu.example.com", "new"
        )
        path.unlink()  # what is left of a dead pod's socket goes with its pod
        await gpu_pod(probe, "failed-update", "pod")
        await running(probe, "failed-update", "pod")
        assert await prepare_calls(system, "old") >= 1
        await delete_namespace(probe, "failed-update")
    finally:
        old.terminate()


def external_claim_and_pod(ns: str) -> list[dict[str, Any]]:
    claim = yaml.safe_load(gpu_template_yaml("external", ns))
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": claim["metadata"],
        "spec": claim["spec"]["spec"],
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pod", "namespace": ns},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "ctr", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "external"}],
        },
    }
    return [claim, pod]


@pytest.mark.upstream_e2e("blocks new pod after force-delete")
async def test_blocks_new_pod_after_force_delete(system: Settings, probe: Runtime) -> None:
    """Upstream: ``It("blocks new pod after force-delete")`` — the plugin fails
    NodeUnprepareResources, the pod and its claim are force-deleted and created again under the same
    names: the new pod is not started (``old ResourceClaim with same name ... still exists``) until
    the old claim is unprepared; then only the new claim is prepared on the node."""
    ns = "force-delete"
    plugin = start_plugin(system)
    try:
        await probe.api.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
        for result in await probe.api.apply(external_claim_and_pod(ns)):
            assert result.error is None, result.error
        await running(probe, ns, "pod")
        old = probe.get("ResourceClaim", ns, "external")
        await admin(system, "set", unprepare_claims=["external"])
        await probe.delete("Pod", ns, "pod", grace_period_seconds=0)
        await probe.api.delete([("ResourceClaim", ns, "external")])
        await wait_for(lambda: probe.get("ResourceClaim", ns, "external") is None, 60, "old claim gone")
        cdi = system.data_dir / "cdi" / NODE
        assert (cdi / f"k8s.gpu.example.com-gpu_{old.metadata.uid}.json").exists()  # still prepared

        for result in await probe.api.apply(external_claim_and_pod(ns)):
            assert result.error is None, result.error
        blocked = (
            f"old ResourceClaim with same name external and different UID {old.metadata.uid} still exists"
        )
        await wait_for(lambda: any(blocked in m for m in warnings(probe, ns, "pod")) or [], 60, "blocked")
        assert phase(probe, ns, "pod") == "Pending"

        await admin(system, "clear")
        await running(probe, ns, "pod")
        new = probe.get("ResourceClaim", ns, "external")
        prepared = sorted(
            p.name for p in cdi.glob("k8s.gpu.example.com-gpu_*.json") if "common" not in p.name
        )
        assert prepared == [f"k8s.gpu.example.com-gpu_{new.metadata.uid}.json"]
        await delete_namespace(probe, ns)
    finally:
        plugin.terminate()
