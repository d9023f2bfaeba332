"""Special-claim saga helpers: deterministic names, idempotent steps and compensations."""

from __future__ import annotations

import msgspec

from services.dra.extended import ExtendedResourceIndex, decide_node, new_in_memory_claim
from services.dra.resourceclaim import DELETE_PROTECTION_FINALIZER
from services.scheduler.sagas.extended_steps import (
    claim_before_delete,
    must_delete,
    persisted_claim,
    pod_with_claim_status,
    pod_without_claim_status,
)
from tests.extended.helpers import container, device_class, pod

GPU = "example.com/gpu"
INDEX = ExtendedResourceIndex.from_classes([device_class("gpu.example.com", GPU)])


def test_persisted_claim_name_is_deterministic_and_avoids_taken_names() -> None:
    p = pod("web", containers=(container("c", requests={GPU: 1}),))
    d = decide_node(p, new_in_memory_claim(p), {}, INDEX)
    assert d.claim is not None
    first = persisted_claim(d.claim, taken=())
    assert first.metadata.name.startswith("web-extended-resources-")
    assert len(first.metadata.name) == len("web-extended-resources-") + 5
    assert persisted_claim(d.claim, taken=()) == first  # replay: same name
    second = persisted_claim(d.claim, taken={first.metadata.name})
    assert second.metadata.name != first.metadata.name
    assert first.metadata.uid == "" and first.status.allocation is None
    assert must_delete(first) and not must_delete(d.claim)


def test_long_pod_names_are_cut_like_generate_name() -> None:
    p = pod("x" * 60, containers=(container("c", requests={GPU: 1}),))
    d = decide_node(p, new_in_memory_claim(p), {}, INDEX)
    assert d.claim is not None
    assert len(persisted_claim(d.claim, taken=()).metadata.name) == 63


def test_pod_status_step_and_compensation_are_idempotent() -> None:
    p = pod("web", containers=(container("c", requests={GPU: 1}),))
    d = decide_node(p, new_in_memory_claim(p), {}, INDEX)
    bound = pod_with_claim_status(p, "web-extended-resources-abcde", d.mappings)
    assert bound.status.extended_resource_claim_status is not None
    assert pod_with_claim_status(bound, "web-extended-resources-abcde", d.mappings) is bound
    assert pod_without_claim_status(bound, "other") is bound
    cleared = pod_without_claim_status(bound, "web-extended-resources-abcde")
    assert cleared.status.extended_resource_claim_status is None
    assert pod_without_claim_status(cleared, "web-extended-resources-abcde") is cleared


def test_finalizer_removed_before_delete() -> None:
    p = pod("web", containers=(container("c", requests={GPU: 1}),))
    d = decide_node(p, new_in_memory_claim(p), {}, INDEX)
    assert d.claim is not None
    c = persisted_claim(d.claim, taken=())
    protected = msgspec.structs.replace(
        c, metadata=msgspec.structs.replace(c.metadata, finalizers=("x/y", DELETE_PROTECTION_FINALIZER))
    )
    ready = claim_before_delete(protected)
    assert ready.metadata.finalizers == ("x/y",)
    assert claim_before_delete(ready) is ready
