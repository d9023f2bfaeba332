"""CRDs and custom objects through the real apiserver on a real nats-server: create, default,
refuse (nothing appended), update with oldSelf rules, delete with the CRD."""

from __future__ import annotations

import pytest

from draflow.infra.eventstore import EventStore
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.protocol import StatusError
from tests.builders.crds import FROB_GROUP, frobnicator_crd, make_crd, make_custom, make_frob

pytestmark = pytest.mark.kep4381


async def test_crd_objects_default_validate_and_go_with_their_crd(
    api: ApiClient, event_store: EventStore
) -> None:
    (crd,) = await api.apply([frobnicator_crd()])
    assert crd.error is None, crd.error
    stored = await api.get("CustomResourceDefinition", f"claimparameters.{FROB_GROUP}")
    assert [c["type"] for c in stored["status"]["conditions"]] == ["NamesAccepted", "Established"]
    assert stored["status"]["storedVersions"] == ["v1"]

    (made,) = await api.apply([make_frob("one")])
    assert made.error is None and made.outcome == "created"
    obj = await api.get("claimparameters", "one")
    assert obj["spec"] == {"numberOfFrobnicators": 1}  # defaulted
    assert obj["apiVersion"] == f"{FROB_GROUP}/v1" and obj["metadata"]["namespace"] == "default"

    before = await event_store.stream_last_seq()
    (bad,) = await api.apply([make_frob("two", 17)])
    assert bad.error is not None and bad.error.reason == "Invalid"
    assert bad.error.message == (
        f'ClaimParameters.{FROB_GROUP} "default/two" is invalid: spec.numberOfFrobnicators: '
        "Invalid value: 17: spec.numberOfFrobnicators in body should be less than or equal to 16"
    )
    (unknown,) = await api.apply([make_frob("two", 2, color="red")])
    assert unknown.error is not None and unknown.error.reason == "BadRequest"
    assert 'strict decoding error: unknown field "spec.color"' in unknown.error.message
    (rule,) = await api.apply([make_frob("two", 2, env={"lower": "x"})])
    assert rule.error is not None
    assert rule.error.message.endswith('spec.env: Invalid value: "object": env names are upper case')
    assert await event_store.stream_last_seq() == before  # refused: nothing appended

    (changed,) = await api.apply([make_frob("one", 4, env={"MODE": "fast"})])
    assert changed.outcome == "configured"
    assert (await api.get("claimparameters", "one"))["spec"]["numberOfFrobnicators"] == 4

    (deleted,) = await api.delete([("CustomResourceDefinition", "", f"claimparameters.{FROB_GROUP}")])
    assert deleted.error is None
    with pytest.raises(StatusError):
        await api.get("claimparameters", "one")
    (gone,) = await api.apply([make_frob("three", 2)])
    assert gone.error is not None and gone.error.reason == "NoKindMatch"


async def test_transition_rule_and_cluster_scope(api: ApiClient) -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {"size": {"type": "integer"}},
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "spec is immutable"}],
            }
        },
    }
    (crd,) = await api.apply([make_crd("Volume", "store.example.com", schema, scope="Cluster")])
    assert crd.error is None, crd.error
    (v,) = await api.apply([make_custom("Volume", "store.example.com/v1", "v1", spec={"size": 1})])
    assert v.error is None and v.namespace == ""
    (again,) = await api.apply([make_custom("Volume", "store.example.com/v1", "v1", spec={"size": 2})])
    assert again.error is not None
    assert again.error.message.endswith('spec: Invalid value: "object": spec is immutable')
    (missing,) = await api.apply([make_custom("Volume", "store.example.com/v1", "v2", spec={})])
    assert missing.error is not None and missing.error.message.endswith("spec.size: Required value")


async def test_invalid_crds_are_refused(api: ApiClient) -> None:
    bad = make_crd("Thing", "example.com", {"type": "object", "properties": {"spec": {"properties": {}}}})
    (res,) = await api.apply([bad])
    assert res.error is not None
    assert (
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value" in res.error.message
    )
    clash = make_crd("Pod", "example.com", {"type": "object"}, plural="mypods")
    (res,) = await api.apply([clash])
    assert res.error is not None and 'kind "Pod" is already served' in res.error.message
    protected = make_crd("Gadget", "gadgets.k8s.io", {"type": "object"})
    (res,) = await api.apply([protected])
    assert res.error is not None and "api-approved.kubernetes.io" in res.error.message
