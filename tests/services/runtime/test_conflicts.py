"""Update conflicts for the claim controller and the kubelet, injected deterministically.

Each test lets another writer change the object through the real apiserver just before the
controller's own append (a hook on the controller's cache, nothing mocked): the append must fail
with the JetStream expected-sequence conflict, the controller re-reads and decides again, and the
end state holds both writes, with nothing created twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from draflow.events.envelope import Event
from draflow.infra.config import Settings
from draflow.infra.errors import ConcurrencyError
from draflow.services.apiserver.server import ApiServer
from draflow.services.claim_controller.service import ClaimControllerService
from draflow.services.runtime.controller import Runtime
from tests.services.test_shells import TEMPLATE_POD, kubelet_builder, register_node, template_pod_running
from tests.shells import eventually, manifests, run, start_runtime


def interfere_once(
    rt: Runtime, kind: str, before: Callable[[], Awaitable[None]]
) -> list[tuple[str, str, str, Exception | None]]:
    """Run ``before`` (another writer) right before ``rt``'s first append to a ``kind`` object;
    returns every append to ``kind`` with the error it ended in."""
    original = rt.cache.append
    seen: list[tuple[str, str, str, Exception | None]] = []
    armed = [True]

    async def append(k: str, namespace: str, name: str, events: Sequence[Event], **kw: Any) -> int:
        if k != kind:
            return await original(k, namespace, name, events, **kw)
        if armed[0]:
            armed[0] = False
            # the controller decided on the version its cache holds now; pin it, or the cache could
            # catch up with the other writer's event while ``before`` awaits and hide the conflict
            kw.setdefault("expected_last_seq", rt.cache.index.version(k, namespace, name))
            await before()
        try:
            seq = await original(k, namespace, name, events, **kw)
        except Exception as exc:
            seen.append((k, namespace, name, exc))
            raise
        seen.append((k, namespace, name, None))
        return seq

    rt.cache.append = append  # type: ignore[method-assign,assignment]
    return seen


async def _annotate(rt: Runtime, kind: str, namespace: str, name: str, key: str) -> None:
    """Another client changes the object's metadata through the apiserver (a new resourceVersion)."""
    obj = await rt.api.get(kind, name, namespace=namespace)
    obj["metadata"].setdefault("annotations", {})[key] = "yes"
    for drop in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
        obj["metadata"].pop(drop, None)
    obj.pop("status", None)
    (result,) = await rt.api.apply([obj])
    assert result.error is None, result.error


async def test_claim_controller_pod_status_write_conflicts_then_converges(
    apiserver: ApiServer, settings: Settings
) -> None:
    probe, probe_events = await start_runtime(settings, "probe")
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    appends = interfere_once(ctl.rt, "Pod", lambda: _annotate(probe, "Pod", "default", "pod0", "touched"))
    try:
        for result in await probe.api.apply(manifests(TEMPLATE_POD)):
            assert result.error is None, result.error
        pod = await eventually(
            lambda: (p := probe.get("Pod", "default", "pod0")) and p.status.resource_claim_statuses and p,
            what="claim statuses recorded after the conflict",
        )
        assert isinstance(appends[0][3], ConcurrencyError), appends  # the first write lost the race
        assert appends[-1][3] is None  # ...and the re-decided one landed
        assert pod.metadata.annotations["touched"] == "yes"  # the other writer's change is kept
        (status,) = pod.status.resource_claim_statuses
        claims = probe.items("ResourceClaim", "default")
        assert [c.metadata.name for c in claims] == [status.resource_claim_name]  # created once
    finally:
        await ctl.stop()
        await probe.stop()
        await probe_events.close()


async def test_kubelet_release_conflicts_with_a_concurrent_claim_write_then_converges(
    apiserver: ApiServer, settings: Settings
) -> None:
    probe, probe_events = await start_runtime(settings, "probe")
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    kubelet, kl = await run(settings, "kubelet", kubelet_builder(settings, "node-1"), before=register_node)
    try:
        claim_name = await template_pod_running(probe)

        # On deletion the kubelet drops the pod from reservedFor; someone writes the claim first.
        appends = interfere_once(
            kubelet.rt,
            "ResourceClaim",
            lambda: _annotate(probe, "ResourceClaim", "default", claim_name, "audit"),
        )
        (res,) = await probe.api.delete([("Pod", "default", "pod0")])
        assert res.error is None
        await eventually(
            lambda: probe.get("ResourceClaim", "default", claim_name) is None, what="claim freed"
        )
        assert appends and isinstance(appends[0][3], ConcurrencyError), appends
        assert any(err is None for *_, err in appends[1:]), appends  # re-decided and written
        assert kl.plugins["gpu.example.com"].prepared == frozenset()
        assert kl.manager.entries() == []
    finally:
        for s in (kubelet, ctl):
            await s.stop()
        await probe.stop()
        await probe_events.close()
