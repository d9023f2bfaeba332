"""Quota status from the objects: every key, classes kept in step, replay/restart determinism."""

from __future__ import annotations

import random

import msgspec

from events.api.core_v1 import Pod, ResourceQuota
from events.api.resource_v1 import DeviceClass, ResourceClaim
from services.dra.extended import ExtendedResourceIndex, pod_requests
from services.dra.quota.state import QuotaState
from services.quota_reconciler.reconcile import reconcile
from tests.extended.helpers import EXAMPLES, container, device_class, load, pod
from tests.extended.quota_helpers import bound, claim, exact, first, quota, special_claim

GPU = "example.com/gpu"
HARD: dict[str, str | int] = {
    "count/resourceclaims.resource.k8s.io": 10,
    "gpu.example.com.deviceclass.resource.k8s.io/devices": 40,
    "requests.example.com/gpu": 40,
    "requests.deviceclass.resource.kubernetes.io/gpu.example.com": 40,
    "requests.cpu": "4",  # not measured here: left out of used
}

Event = tuple[str, object]


def _log() -> list[Event]:
    """A namespace's history: a class, a quota, pods and claims, some deleted again."""
    index_class = device_class("gpu.example.com", GPU, "2025-01-01T00:00:00Z")
    web = pod("web", containers=(container("a", requests={GPU: 2}),))

    sc, maps = special_claim(
        web, ExtendedResourceIndex.from_classes([index_class]), "web-extended-resources-x"
    )
    plugin_pod = pod("legacy", containers=(container("a", requests={GPU: 1}),))
    return [
        ("apply", index_class),
        ("apply", quota("gpu", HARD)),
        ("apply", web),
        ("apply", sc),
        ("apply", bound(web, sc.metadata.name, maps)),
        ("apply", plugin_pod),  # device-plugin node: no special claim
        ("apply", claim("c1", [exact("a", "gpu.example.com", 3)])),
        ("apply", claim("c2", [first("a", ("s1", "gpu.example.com", 1), ("s2", "gpu.example.com", None))])),
        ("apply", claim("gone", [exact("a", "gpu.example.com", 5)])),
        ("delete", ("ResourceClaim", "default", "gone")),
        ("apply", quota("other-ns", {"requests.example.com/gpu": 1}, namespace="other")),
    ]


def _fold(events: list[Event], state: QuotaState | None = None) -> QuotaState:
    state = state or QuotaState()
    for op, payload in events:
        if op == "apply":
            assert isinstance(payload, DeviceClass | Pod | ResourceClaim | ResourceQuota)
            state.apply(payload)
        else:
            assert isinstance(payload, tuple)
            state.delete(*payload)
    return state


def _statuses(state: QuotaState) -> bytes:
    return msgspec.json.encode([(q.metadata.namespace, q.metadata.name, q.status) for q in reconcile(state)])


def test_used_for_every_key_and_classes_in_step() -> None:
    state = _fold(_log())
    out = {q.metadata.name: q for q in reconcile(state)}
    gpu = out["gpu"].status
    # web 2 (pod; its special claim adds nothing) + legacy 1 + c1 3 + c2 32 (All worst case)
    assert gpu.used == {
        "count/resourceclaims.resource.k8s.io": "3",
        "gpu.example.com.deviceclass.resource.k8s.io/devices": "38",
        "requests.deviceclass.resource.kubernetes.io/gpu.example.com": "38",
        "requests.example.com/gpu": "38",
    }
    assert gpu.hard == {k: str(v) for k, v in HARD.items()}
    assert out["other-ns"].status.used == {"requests.example.com/gpu": "0"}


def test_upstream_numbers_without_class_sync() -> None:
    state = _fold(_log(), QuotaState(sync_classes=False))
    gpu = {q.metadata.name: q for q in reconcile(state)}["gpu"].status
    # upstream: the device-plugin pod never reaches the devices key
    assert gpu.used == {
        "count/resourceclaims.resource.k8s.io": "3",
        "gpu.example.com.deviceclass.resource.k8s.io/devices": "37",
        "requests.deviceclass.resource.kubernetes.io/gpu.example.com": "37",
        "requests.example.com/gpu": "38",
    }


def test_replay_in_any_order_gives_identical_status() -> None:
    events = _log()
    expected = _statuses(_fold(events))
    final: dict[tuple[str, str, str], object] = {}
    for op, payload in events:
        if op == "apply":
            meta = payload.metadata  # type: ignore[attr-defined]
            final[(type(payload).__name__, meta.namespace, meta.name)] = payload
        else:
            assert isinstance(payload, tuple)
            final.pop(payload, None)
    objects: list[Event] = [("apply", o) for o in final.values()]
    rng = random.Random(5004)
    for _ in range(20):
        rng.shuffle(objects)
        # the status depends on the objects only, never on the order they arrived in
        assert _statuses(_fold(objects)) == expected


def test_restart_rebuilds_identically_and_reconciled_quotas_are_stable() -> None:
    events = _log()
    before_crash = _fold(events[:6])
    first_half = reconcile(before_crash)
    assert first_half  # the quota needed a status
    # the service appended the statuses, then crashed; on restart it folds the whole log again,
    # status events included
    log_after = events + [("apply", q) for q in first_half]
    resumed = _fold(log_after)
    fresh = _fold(events)
    assert _statuses(resumed) == _statuses(fresh)
    settled = log_after + [("apply", q) for q in reconcile(resumed)]
    assert reconcile(_fold(settled)) == []  # nothing more to append: replay is a no-op


def test_deleting_the_pod_frees_its_quota() -> None:
    state = _fold(_log())
    state.delete("Pod", "default", "legacy")
    gpu = {q.metadata.name: q for q in reconcile(state)}["gpu"].status
    assert gpu.used["requests.example.com/gpu"] == "37"
    assert gpu.used["gpu.example.com.deviceclass.resource.k8s.io/devices"] == "37"


def test_kep_quota_example_tracks_both_keys() -> None:
    (q,) = load(EXAMPLES / "quota.yaml")
    (dc,) = load(EXAMPLES / "deviceclass.yaml")
    assert isinstance(q, ResourceQuota) and isinstance(dc, DeviceClass)
    state = QuotaState()
    state.apply(dc)
    state.apply(q)
    state.apply(pod("demo", containers=(container("demo", limits={GPU: 1}),)))
    (out,) = reconcile(state)
    assert out.status.used == {
        "gpu.example.com.deviceclass.resource.k8s.io/devices": "1",
        "requests.example.com/gpu": "1",
    }


def test_incremental_totals_equal_recomputation_under_random_events() -> None:
    rng = random.Random(42)
    classes = [
        device_class("gpu.example.com", GPU, "2025-01-01T00:00:00Z"),
        device_class("gpu.example.com", None, "2025-01-01T00:00:00Z"),
        device_class("alt.example.com", GPU, "2025-03-01T00:00:00Z"),
    ]
    state = QuotaState()
    state.apply(classes[0])
    index = ExtendedResourceIndex.from_classes([classes[0]])
    for step in range(300):
        roll = rng.random()
        name = f"p{rng.randrange(6)}"
        if roll < 0.3:
            n = rng.randrange(0, 4)
            p = pod(name, containers=(container("c", requests={GPU: n}),))
            uid = f"uid-{name}-{rng.randrange(2)}"  # sometimes a new pod with the same name
            state.apply(msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, uid=uid)))
        elif roll < 0.5:
            owner = state.pods.get(("default", name))
            if owner is not None and pod_requests(owner).get(GPU, 0) > 0:
                sc, maps = special_claim(
                    owner,
                    index,
                    f"{name}-extended-resources-{rng.randrange(3)}",
                    f"2025-01-0{rng.randrange(1, 4)}T00:00:00Z",
                )
                state.apply(sc)
                if rng.random() < 0.5:
                    state.apply(bound(owner, sc.metadata.name, maps))
        elif roll < 0.65:
            state.apply(claim(f"c{rng.randrange(4)}", [exact("a", "gpu.example.com", rng.randrange(1, 5))]))
        elif roll < 0.8:
            kind = rng.choice(["Pod", "ResourceClaim"])
            pool = state.pods if kind == "Pod" else state.claims
            if pool:
                ns, victim = rng.choice(sorted(pool))
                state.delete(kind, ns, victim)
        elif roll < 0.9:
            state.apply(rng.choice(classes))
        else:
            state.delete("DeviceClass", "", "alt.example.com")
        assert state.namespace_usage("default") == state.recomputed_usage("default"), step
