"""The long fuzz run (``-m slow``): 10,000 examples each over every admitted kind and over every
request decoder of the apiserver's API (the NATS request verbs and the nodes' API).

Kinds: seeds are the real-world corpus, the examples and a manifest for each kind neither has
(checked: every kind the registry admits has a seed), mutated as in ``test_fuzz``; each must be a
clear refusal naming object, field and rule, or a valid object. Requests: arbitrary JSON values
and bytes for each verb must decode to the verb's request or fail with the errors the apiserver
turns into a 400; a decoded node request must be admitted or refused by NodeRestriction with a
Status, never a crash.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draflow.events.api.codec import decode_object
from draflow.events.api.errors import ApiError
from draflow.events.api.loader import load_manifests, substitute_index
from draflow.events.api.registry import resource_types
from draflow.projections.objects import ObjectIndex
from draflow.services.apiserver.noderestriction import NodeRestriction
from draflow.services.runtime.protocol import REQUEST_TYPES, StatusError
from tests.events.api import test_fuzz

pytestmark = pytest.mark.slow

LONG = settings(
    max_examples=10_000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# kinds that neither the corpus nor the examples write down
EXTRA = [
    {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "node-1", "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40},
    },
    {
        "apiVersion": "gpu.acme.com/v1alpha1",
        "kind": "NodeGpuCapacity",
        "metadata": {"name": "node-1"},
        "spec": {"nodeName": "node-1", "gpus": [{"name": "gpu-0", "memory": "16Gi"}]},
    },
]


@lru_cache(maxsize=1)
def seeds() -> list[dict[str, Any]]:
    out = list(test_fuzz.seeds())
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        loaded = load_manifests(substitute_index(path.read_text(), 0))
        out += [r.raw for r in loaded if isinstance(r.raw, dict)]
    return out + EXTRA


def test_every_admitted_kind_has_a_seed() -> None:
    kinds = {d.get("kind") for d in seeds()}
    missing = [rt.kind for rt in resource_types() if getattr(rt.struct, "WIRE_KIND", rt.kind) not in kinds]
    assert missing == []


@LONG
@given(test_fuzz.mutated(pool=seeds))
def test_every_kind_mutated_is_refused_or_valid(doc: dict[str, Any]) -> None:
    try:
        obj = decode_object(doc)
    except ApiError as exc:
        test_fuzz.check_outcome(None, exc)
    else:
        test_fuzz.check_outcome(obj, None)


json_values = st.recursive(
    test_fuzz.scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=16), inner, max_size=6),
    max_leaves=30,
)
VERBS = sorted(REQUEST_TYPES)


def _fields(verb: str) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with the verb's own field names, so decoding gets past the first key."""
    names = [f.encode_name for f in msgspec.structs.fields(REQUEST_TYPES[verb])]
    return st.dictionaries(st.sampled_from(names), json_values, max_size=len(names))


NODES = NodeRestriction(ObjectIndex())


@LONG
@given(st.sampled_from(VERBS), st.data())
def test_request_decoders_answer_or_refuse(verb: str, data: st.DataObject) -> None:
    payload = data.draw(
        st.one_of(
            _fields(verb).map(msgspec.json.encode),
            json_values.map(msgspec.json.encode),
            st.binary(max_size=200),
        )
    )
    try:
        req = msgspec.json.decode(payload, type=REQUEST_TYPES[verb])
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        return  # the apiserver answers 400 "invalid <verb> request"
    try:
        NODES.admit("node-1", verb, req)
    except StatusError as exc:
        assert exc.status.code in (400, 403, 404) and exc.status.message
