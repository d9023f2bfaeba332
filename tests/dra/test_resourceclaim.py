"""``services.dra.resourceclaim``: the one pod -> claim resolution, pinned to Kubernetes' behaviour
where the three copies it replaces disagreed (``k8s.io/dynamic-resource-allocation/resourceclaim``:
``Name``, ``IsForPod``, ``IsReservedForPod``; ``metav1.IsControlledBy``)."""

from __future__ import annotations

import re

import msgspec
import pytest

from events.api.classic_pod import decode_manifest, pod_claims
from events.api.core_v1 import Pod, PodExtendedResourceClaimStatus, PodResourceClaim
from events.api.meta import ObjectMeta, OwnerReference
from events.api.resource_v1 import ResourceClaim, ResourceClaimConsumerReference
from services.dra.classic.podclaims import Blocked, claim_from_template, sync_pod
from services.dra.resourceclaim import (
    ClaimNameError,
    ClaimProblem,
    ClaimRef,
    is_controlled_by,
    is_for_pod,
    is_pod_done,
    is_pod_terminal,
    is_reserved_for_pod,
    pod_claim_names,
    resolve_claim_name,
    resolve_claims,
)
from services.scheduler.plugins.classic.scheduling import UNSCHEDULABLE, pre_filter
from tests.builders import make_claim, make_pod

NOT_CREATED = "^" + re.escape('pod "default/p": ResourceClaim not created yet') + "$"


class _Claims:
    def __init__(self, *claims: ResourceClaim) -> None:
        self.by_key = {(c.metadata.namespace, c.metadata.name): c for c in claims}

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        return self.by_key.get((namespace, name))


def _owner(uid: str, *, controller: bool) -> OwnerReference:
    return OwnerReference(api_version="v1", kind="Pod", name="pod", uid=uid, controller=controller)


def _with_owners(claim: ResourceClaim, *refs: OwnerReference) -> ResourceClaim:
    return msgspec.structs.replace(
        claim, metadata=msgspec.structs.replace(claim.metadata, owner_references=refs)
    )


def test_reserved_for_pod_is_any_entry_with_the_pods_uid() -> None:
    """Upstream ``IsReservedForPod`` compares uids only (the scheduler's copy also required
    ``resource: pods``; the kubelet's did not)."""
    pod = make_pod("p")
    other_resource = ResourceClaimConsumerReference(
        api_group="example.com", resource="things", name="p", uid="uid-p"
    )
    assert is_reserved_for_pod(pod, make_claim(reserved_for=[other_resource]))
    assert is_reserved_for_pod(pod, make_claim(reserved_for=["p"]))
    assert not is_reserved_for_pod(pod, make_claim(reserved_for=["q"]))


def test_an_entry_without_claim_or_template_is_upstreams_unsupported_error() -> None:
    """``Name``: ``pod "ns/name", spec.resourceClaim "x": none of the supported fields are set``
    (the claim controller's copy said "neither ... is set", the scheduler's left the name unquoted)."""
    pod = msgspec.structs.replace(
        make_pod("p"),
        spec=msgspec.structs.replace(make_pod("p").spec, resource_claims=(PodResourceClaim(name="gpu"),)),
    )
    want = 'pod "default/p", spec.resourceClaim "gpu": none of the supported fields are set'
    with pytest.raises(ClaimNameError, match=re.escape(want)) as err:
        resolve_claim_name(pod, pod.spec.resource_claims[0])
    assert not err.value.not_created
    with pytest.raises(ClaimProblem) as problem:
        resolve_claims(pod, _Claims())
    assert str(problem.value) == want


def test_a_template_claim_not_created_yet() -> None:
    pod = make_pod("p", template_claims={"gpu": "tmpl"})
    with pytest.raises(ClaimNameError, match=NOT_CREATED) as err:
        pod_claim_names(pod)
    assert err.value.not_created
    with pytest.raises(ClaimProblem, match=NOT_CREATED):
        resolve_claims(pod, _Claims())


def test_a_template_entry_whose_claim_was_not_needed_is_skipped() -> None:
    pod = make_pod("p", template_claims={"gpu": "tmpl"}, statuses={"gpu": None}, claims={"net": "shared"})
    shared = make_claim("shared")
    assert pod_claim_names(pod) == [("shared", False)]
    assert resolve_claims(pod, _Claims(shared)) == [shared]


def test_a_generated_claim_must_be_controlled_by_the_pod() -> None:
    """``IsForPod`` = same namespace and ``metav1.IsControlledBy``: the *controller* reference
    names the pod. A plain (non-controller) owner reference to the pod is not enough (the classic
    copy accepted any owner reference of kind Pod)."""
    pod = make_pod("p", template_claims={"gpu": "tmpl"}, statuses={"gpu": "p-gpu-x"})
    base = make_claim("p-gpu-x")
    owned = _with_owners(base, _owner("uid-p", controller=True))
    plain = _with_owners(base, _owner("uid-p", controller=False))
    other_controller = _with_owners(base, _owner("uid-q", controller=True), _owner("uid-p", controller=True))
    assert is_for_pod(pod, owned) is None
    assert resolve_claims(pod, _Claims(owned)) == [owned]
    reason = "ResourceClaim default/p-gpu-x was not created for pod default/p (pod is not owner)"
    for claim in (plain, other_controller):  # the first controller reference is the controller
        assert is_for_pod(pod, claim) == reason
        with pytest.raises(ClaimProblem, match=re.escape(reason)):
            resolve_claims(pod, _Claims(claim))
    elsewhere = msgspec.structs.replace(
        owned, metadata=msgspec.structs.replace(owned.metadata, namespace="x")
    )
    assert is_for_pod(pod, elsewhere) is not None


def _kep_pod() -> Pod:
    obj = decode_manifest(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
            "spec": {
                "resourceClaims": [{"name": "gpu", "template": {"resourceClassName": "acme-gpu"}}],
                "containers": [{"name": "c", "image": "i", "resources": {"claims": ["gpu"]}}],
            },
        }
    )
    assert isinstance(obj, Pod)
    return obj


def test_classic_claims_follow_the_same_ownership_rule() -> None:
    """KEP-3063 (Kubernetes 1.27-1.31 ``IsForPod``): the inline template's claim must be
    controlled by the pod; the claim controller refuses a same-named claim it does not control and
    the scheduler does not use it."""
    pod = _kep_pod()
    claims = pod_claims(pod)
    assert claims is not None
    made = claim_from_template(pod, claims.resource_claims[0])
    assert is_controlled_by(made.metadata, "uid-p")
    assert sync_pod(pod, {"p-gpu": made}) == []
    ref = msgspec.structs.replace(made.metadata.owner_references[0], controller=False)
    plain = msgspec.structs.replace(
        made, metadata=msgspec.structs.replace(made.metadata, owner_references=(ref,))
    )
    assert sync_pod(pod, {"p-gpu": plain}) == [
        Blocked(reason="ResourceClaim p-gpu exists but was not created for pod p")
    ]
    assert pre_filter(pod, {"p-gpu": plain}).code == UNSCHEDULABLE
    assert pre_filter(pod, {"p-gpu": made}).code != UNSCHEDULABLE


def test_the_special_claim_for_extended_resources_comes_last() -> None:
    pod = make_pod("p", claims={"a": "ca"})
    status = msgspec.structs.replace(
        pod.status,
        extended_resource_claim_status=PodExtendedResourceClaimStatus(
            resource_claim_name="p-extended-resources-x"
        ),
    )
    pod = msgspec.structs.replace(pod, status=status)
    assert pod_claim_names(pod) == [("ca", False), ("p-extended-resources-x", False)]


def test_terminal_and_done_pods() -> None:
    assert is_pod_terminal(make_pod(phase="Succeeded")) and is_pod_terminal(make_pod(phase="Failed"))
    assert not is_pod_terminal(make_pod(phase="Running"))
    assert is_pod_done(make_pod(deleting=True))  # deleted before it was scheduled
    assert not is_pod_done(make_pod(deleting=True, node="n1"))  # the kubelet still has to stop it


def test_claim_ref() -> None:
    claim = make_claim("c", namespace="ns", uid="u")
    ref = ClaimRef.of(claim)
    assert ref == ClaimRef(namespace="ns", name="c", uid="u") and str(ref) == "ns/c"
    assert {ref: 1}[ClaimRef(namespace="ns", name="c", uid="u")] == 1
    moved = msgspec.structs.replace(claim, metadata=ObjectMeta(name="d", namespace="ns", uid="v"))
    assert ClaimRef.of(moved).name == "d"
