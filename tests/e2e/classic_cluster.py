"""A classic-DRA cluster of real services for the KEP-3063 flow tests.

Processes (``python -m ...``, as the Procfile runs them): the apiserver, the driver-controller
(both example drivers), the ACME capacity publisher, one kubelet per node (``--gpus 0`` so the
structured example driver stays out, ``--labels`` for the classic drivers) and, as the Procfile
runs them, the classic drivers' kubelet plugins on the nodes labelled for them
(``draflow.services.drivers.classic_plugin``: registered with the kubelet, called over gRPC).
The scheduler is the real :class:`SchedulerService` running in the test process (as
``tests/services/scheduler/service`` does) with a short backoff: a classic pod takes several
attempts (claims created, node selected, allocation, reservation) and the default 1 s doubling
backoff would make each test slow. All on the test's own stream of the session's real nats-server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import yaml

from draflow.events.api.classic_v1alpha1 import ResourceClaimStatus
from draflow.events.dra import PodUnschedulable
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import StatusError
from draflow.services.scheduler.framework import SchedulerConfig
from draflow.services.scheduler.service import SchedulerService
from tests.helpers import assert_eventually
from tests.paths import ROOT
from tests.processes import Proc

EXAMPLES = ROOT / "examples" / "classic"
CLAIMS = "resourceclaims.cdi.k8s.io"
FABRIC = "fpga.example.com/fabric=true"


def acme(gpus: int, memory: str) -> str:
    return f"gpu.acme.com/gpus={gpus},gpu.acme.com/gpu-memory={memory}"


def classic_drivers(labels: str) -> list[str]:
    """The classic drivers whose plugin runs on a node with these ``--labels`` (as in the Procfile)."""
    return [
        d
        for d, label in (
            ("fpga.example.com", FABRIC),
            ("gpu.acme.com", "gpu.acme.com/gpus="),
            ("frobnicator.example.com", "frobnicator.example.com/frobnicators="),
        )
        if label in labels
    ]


def example(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


async def eventually(check: Callable[[], Awaitable[Any]], timeout_s: float = 30.0, what: str = "") -> Any:
    return await assert_eventually(check, timeout_s=timeout_s, interval_s=0.1, message=what)


class ClassicCluster:
    def __init__(self, settings: Settings, store: EventStore) -> None:
        self.settings = settings
        self.store = store
        self.procs: dict[str, Proc] = {}
        self.api: ApiClient | None = None
        self.scheduler: SchedulerService | None = None
        self._sched: tuple[asyncio.Event, asyncio.Task[None], EventStore] | None = None
        self.driver_env: dict[str, str] = {}

    # -- starting -------------------------------------------------------------------------------
    def start_driver_controller(self) -> Proc:
        proc = Proc(self.settings, "draflow.services.driver_controller", None, self.driver_env)
        proc.expect("driver-controller: drivers")
        self.procs["driver-controller"] = proc
        return proc

    async def start(self, nodes: dict[str, str], *, acme_publisher: bool = False, **driver_env: str) -> None:
        """``nodes``: node name -> ``--labels`` value."""
        self.driver_env = {"DRAFLOW_CLASSIC_RETRY_ATTEMPTS": "10", **driver_env}
        self.procs["apiserver"] = Proc(self.settings, "draflow.services.apiserver")
        pending = {
            "driver-controller": Proc(
                self.settings, "draflow.services.driver_controller", None, self.driver_env
            )
        }
        if acme_publisher:
            pending["acme"] = Proc(self.settings, "draflow.services.drivers.acme_gpu")
        plugins: dict[str, str] = {}  # process name -> what it prints once it serves
        for node, labels in nodes.items():
            args = ["--node", node, "--gpus", "0", "--labels", labels]
            pending[f"kubelet-{node}"] = Proc(self.settings, "draflow.services.kubelet", args)
            for driver in classic_drivers(labels):
                name = f"{driver}-plugin-{node}"
                argv = ["--driver", driver, "--node", node]
                pending[name] = Proc(self.settings, "draflow.services.drivers.classic_plugin", argv)
                plugins[name] = f"{driver} plugin on {node}: serving"
        self.procs.update(pending)
        self.procs["apiserver"].expect("apiserver: serving")
        self.api = await ApiClient.connect(self.settings, actor="test", timeout_s=10.0)
        pending["driver-controller"].expect("driver-controller: drivers")
        if acme_publisher:
            pending["acme"].expect("acme-gpu-driver")
        for node in nodes:
            pending[f"kubelet-{node}"].expect(f"kubelet {node}: registered")
        for name, ready in plugins.items():
            pending[name].expect(ready)
        sched_store = await EventStore.open(self.settings, "scheduler")
        config = SchedulerConfig(initial_backoff_seconds=0.1, max_backoff_seconds=0.5)
        self.scheduler = SchedulerService(sched_store, api=self.api, config=config)
        stop = asyncio.Event()
        task = asyncio.create_task(self.scheduler.run(stop))
        self._sched = (stop, task, sched_store)

    async def stop(self) -> list[int]:
        if self._sched is not None:
            stop, task, store = self._sched
            stop.set()
            await asyncio.wait_for(task, 15)
            await store.close()
        if self.api is not None:
            await self.api.close()
        return [p.terminate() for p in self.procs.values()]

    # -- objects --------------------------------------------------------------------------------
    @property
    def client(self) -> ApiClient:
        assert self.api is not None
        return self.api

    async def apply(self, *docs: dict[str, Any]) -> None:
        results = await self.client.apply(list(docs))
        assert [r.error for r in results] == [None] * len(docs), results

    async def claim(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.client.get(CLAIMS, name, namespace="default")
        except StatusError as exc:
            if exc.status.code == 404:
                return None
            raise

    async def pod(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.client.get("Pod", name, namespace="default")
        except StatusError as exc:
            if exc.status.code == 404:
                return None
            raise

    async def allocated(self, name: str, timeout_s: float = 30.0) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            claim = await self.claim(name)
            return claim if claim and claim["status"].get("phase") == "Allocated" else None

        result: dict[str, Any] = await eventually(check, timeout_s, f"claim {name} allocated")
        return result

    async def running(self, name: str, timeout_s: float = 30.0) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            pod = await self.pod(name)
            return pod if pod and pod.get("status", {}).get("phase") == "Running" else None

        result: dict[str, Any] = await eventually(check, timeout_s, f"pod {name} running")
        return result

    async def gone(self, kind: str, name: str, timeout_s: float = 30.0) -> None:
        async def check() -> bool:
            getter = self.claim if kind == CLAIMS else self.pod
            return await getter(name) is None

        await eventually(check, timeout_s, f"{kind} {name} gone")

    async def delete(self, kind: str, name: str) -> None:
        results = await self.client.delete([(kind, "default", name)])
        assert [r.error for r in results] == [None], results

    async def claim_history(self, name: str) -> list[ResourceClaimStatus]:
        """Every status the claim had, oldest first (from its events in the log)."""
        subject = self.store.subject("ClassicResourceClaim", "default", name)
        out = []
        for env in await self.store.events(subject):
            status = getattr(env.data, "status", None)
            if isinstance(status, ResourceClaimStatus):
                out.append(status)
        return out

    async def unschedulable_history(self, name: str) -> list[PodUnschedulable]:
        """Every ``PodUnschedulable`` the scheduler appended to the pod, oldest first."""
        subject = self.store.subject("Pod", "default", name)
        events = await self.store.events(subject)
        return [env.data for env in events if isinstance(env.data, PodUnschedulable)]


def pod(
    name: str,
    claims: dict[str, dict[str, Any] | str],
    *,
    cpu: str | None = None,
    node_name: str | None = None,
) -> dict[str, Any]:
    """A KEP-shaped Pod: ``claims`` maps the pod claim name to a claim name (resourceClaimName)
    or to an inline template (resourceClassName + parameters); no claims is a plain Pod."""
    resources: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    if claims:
        spec["resourceClaims"] = [
            {"name": k, "resourceClaimName": v} if isinstance(v, str) else {"name": k, "template": v}
            for k, v in claims.items()
        ]
        resources["claims"] = list(claims)
    if cpu is not None:
        resources["requests"] = {"cpu": cpu}
    spec["containers"] = [{"name": "app", "image": "registry.example.com/app:1", "resources": resources}]
    if node_name is not None:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def plain_pod(name: str, *, cpu: str, node_name: str | None = None) -> dict[str, Any]:
    return pod(name, {}, cpu=cpu, node_name=node_name)


def claim(name: str, cls: str, parameters: dict[str, Any], *, mode: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceClassName": cls, "parameters": parameters}
    if mode is not None:
        spec["allocationMode"] = mode
    return {
        "apiVersion": "cdi.k8s.io/v1alpha1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }
