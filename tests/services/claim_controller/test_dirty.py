"""The claim controller's incremental passes: which keys a change marks, and sync_pod on a subset."""

from __future__ import annotations

import asyncio

import pytest

from draflow.events.api.base import ApiStruct
from draflow.infra.config import Settings
from draflow.projections.objects import Change
from draflow.services.apiserver.server import ApiServer
from draflow.services.claim_controller import CreateClaim, sync_pod
from draflow.services.claim_controller.dirty import Dependencies
from draflow.services.claim_controller.service import ClaimControllerService
from draflow.services.dra.resourceclaim import POD_CLAIM_NAME_ANNOTATION
from tests.builders import make_claim, make_pod, make_template
from tests.services.test_shells import TEMPLATE_POD
from tests.shells import eventually, manifests, run, start_runtime

pytestmark = pytest.mark.kep4381


def _change(deps: Dependencies, kind: str, obj: ApiStruct, type_: str = "ADDED") -> None:
    meta = obj.metadata  # type: ignore[attr-defined]
    deps.on_change(kind, meta.namespace, meta.name, Change(type_, obj, 1))


def test_pod_change_marks_the_pod_its_claims_and_the_claims_it_owns_or_is_reserved_on() -> None:
    deps = Dependencies()
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"}, claims={"shared": "user-claim"})
    owned = make_claim("pod0-gpu-xyz", owner=pod, annotations={POD_CLAIM_NAME_ANNOTATION: "gpu"})
    reserving = make_claim("other", reserved_for=["pod0"])
    unrelated = make_claim("unrelated", reserved_for=["pod1"])
    deps.rebuild([], [owned, reserving, unrelated])
    _change(deps, "Pod", pod)
    dirty = deps.take()
    assert dirty.pods == {("default", "pod0")}
    assert dirty.claims == {("default", n) for n in ("pod0-gpu-xyz", "other", "user-claim")}
    assert deps.owned_by("default", "uid-pod0") == {"pod0-gpu-xyz"}
    assert deps.take().pods == set()  # taken once


def test_claim_change_marks_reserved_owner_and_referencing_pods_also_after_deletion() -> None:
    deps = Dependencies()
    owner = make_pod("owner", template_claims={"gpu": "single-gpu"})
    user = make_pod("user", claims={"c": "c1"})
    deps.rebuild([owner, user], [])
    claim = make_claim("c1", owner=owner, reserved_for=["r1"])
    _change(deps, "ResourceClaim", claim)
    dirty = deps.take()
    assert dirty.claims == {("default", "c1")}
    assert dirty.pods == {("default", n) for n in ("owner", "user", "r1")}
    released = make_claim("c1", owner=owner)
    _change(deps, "ResourceClaim", released, "MODIFIED")
    assert ("default", "r1") in deps.take().pods  # the pod it was reserved for, from the index
    _change(deps, "ResourceClaim", released, "DELETED")
    assert deps.owned_by("default", "uid-owner") == set()
    assert deps.take().pods == {("default", "owner"), ("default", "user")}


def test_template_change_marks_the_pods_using_it_and_a_deleted_pod_unlinks() -> None:
    deps = Dependencies()
    a = make_pod("a", template_claims={"gpu": "single-gpu"})
    b = make_pod("b", template_claims={"gpu": "other"})
    c = make_pod("c", template_claims={"gpu": "single-gpu"}, namespace="ns2")
    deps.rebuild([a, b, c], [])
    _change(deps, "ResourceClaimTemplate", make_template("single-gpu"))
    assert deps.take().pods == {("default", "a")}
    _change(deps, "Pod", a, "DELETED")
    deps.take()
    _change(deps, "ResourceClaimTemplate", make_template("single-gpu"))
    assert deps.take().pods == set()


def test_sync_pod_with_only_its_claims_and_taken_names_decides_like_with_the_namespace() -> None:
    pod = make_pod("pod0", template_claims={"gpu": "single-gpu"})
    first = sync_pod(pod, [], [make_template("single-gpu")])[0]
    assert isinstance(first, CreateClaim)
    clash = make_claim(first.name)
    whole = sync_pod(pod, [clash, make_claim("x")], [make_template("single-gpu")])
    subset = sync_pod(pod, [], [make_template("single-gpu")], taken={clash.metadata.name})
    assert subset == whole and isinstance(whole[0], CreateClaim) and whole[0].name != first.name


async def test_service_converges_on_hints_alone_after_the_first_full_pass(
    apiserver: ApiServer, settings: Settings
) -> None:
    ctl, svc = await run(
        settings, "claim-controller", lambda rt: ClaimControllerService(rt, full_resync_s=3600.0)
    )
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        await eventually(lambda: svc.full_passes == 1, what="first pass")
        for result in await probe.api.apply(manifests(TEMPLATE_POD)):
            assert result.error is None, result.error
        pod = await eventually(
            lambda: (p := probe.get("Pod", "default", "pod0")) and p.status.resource_claim_statuses and p,
            what="claim statuses",
        )
        name = pod.status.resource_claim_statuses[0].resource_claim_name
        assert probe.get("ResourceClaim", "default", name) is not None
        assert await probe.delete("Pod", "default", "pod0", grace_period_seconds=0)
        await eventually(lambda: probe.get("ResourceClaim", "default", name) is None, what="claim deleted")
        assert svc.full_passes == 1
    finally:
        await ctl.stop()
        await probe.stop()
        await probe_events.close()


def _pods_yaml(n: int) -> str:
    return "".join(
        TEMPLATE_POD.split("---", 1)[1].replace("name: pod0", f"name: pod{i}").join(["---", "\n"])
        for i in range(n)
    )


async def test_the_pods_of_one_pass_get_their_claims_concurrently(
    apiserver: ApiServer, settings: Settings
) -> None:
    """Twenty pods applied at once: each gets its own claim and its status, with the pods of a
    pass synced side by side (at most ``concurrency`` at a time)."""
    ctl, svc = await run(
        settings,
        "claim-controller",
        lambda rt: ClaimControllerService(rt, full_resync_s=3600.0, concurrency=8),
    )
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        await eventually(lambda: svc.full_passes == 1, what="first pass")
        for result in await probe.api.apply(manifests(TEMPLATE_POD.split("---", 1)[0] + _pods_yaml(20))):
            assert result.error is None, result.error
        names = {f"pod{i}" for i in range(20)}

        def recorded() -> set[str]:
            out = set()
            for n in names:
                pod = probe.get("Pod", "default", n)
                if pod is not None and pod.status.resource_claim_statuses:
                    out.add(pod.status.resource_claim_statuses[0].resource_claim_name)
            return out

        claims = await eventually(lambda: len(r := recorded()) == 20 and r, what="twenty claim statuses")
        for name in claims:
            claim = probe.get("ResourceClaim", "default", name)
            assert claim is not None and len(claim.metadata.owner_references) == 1
    finally:
        await ctl.stop()
        await probe.stop()
        await probe_events.close()


async def test_one_failing_object_does_not_stop_the_others_of_a_pass(
    apiserver: ApiServer, settings: Settings
) -> None:
    rt, events = await start_runtime(settings, "claim-controller")
    try:
        svc = ClaimControllerService(rt, concurrency=2)
        synced: list[str] = []

        async def sync(ns: str, name: str) -> None:
            await asyncio.sleep(0)
            if name == "bad":
                raise RuntimeError("refused")
            synced.append(name)

        keys = [("default", n) for n in ("a", "bad", "b", "c")]
        with pytest.raises(RuntimeError, match="refused"):
            await svc._each(keys, sync)
        assert sorted(synced) == ["a", "b", "c"]  # the pass went on; the failure comes after
    finally:
        await rt.stop()
        await events.close()
