"""What ``draflow explain pod`` reads from the log: one pass, everything partitioned by pod uid.

The pod's own events, the PodScheduling / Reallocation sagas started for it, its ResourceClaims'
events and the Kubernetes Events about it, split into the pod's incarnations
(:mod:`draflow.services.cli.incarnations`): the pod that has (or last had) the name is explained, the
earlier ones travel along as ``Explanation.earlier``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from draflow.events.api.classic_v1alpha1 import CLAIM_KIND as CLASSIC_CLAIM
from draflow.events.api.core_v1 import Pod
from draflow.events.codec import DecodeError, decode
from draflow.events.envelope import Envelope, Event
from draflow.events.objects import EVENT_KIND, KubeEventRecorded
from draflow.events.saga import SagaStarted
from draflow.events.subjects import decode_token, encode_token
from draflow.projections.objects import fold
from draflow.sagas.engine import SAGA_KIND
from draflow.sagas.view import SagaView, fold_view
from draflow.services.cli.incarnations import claim_events_for, claim_lives, names_of, owner_of_seq, split_pod
from draflow.services.cli.main import UserError

__all__ = ["Explanation", "collect"]


class Explanation(msgspec.Struct, kw_only=True):
    """What explain shows about one pod object (one uid); ``earlier`` holds the pods that had the
    same name before it (each an Explanation of its own, shown only as history)."""

    namespace: str
    name: str
    uid: str = ""
    pod: Pod | None = None  # None once deleted
    last: Pod | None = None  # its last known state, also after deletion
    first_seq: int = 0
    deleted_seq: int = 0
    pod_events: list[Envelope[Event]] = msgspec.field(default_factory=list)
    sagas: list[SagaView] = msgspec.field(default_factory=list)
    claims: dict[str, list[Envelope[Event]]] = msgspec.field(default_factory=dict)
    kube_events: dict[str, Any] = msgspec.field(default_factory=dict)  # event name -> KubeEvent
    kube_event_envs: list[Envelope[Event]] = msgspec.field(default_factory=list)
    saga_seqs: dict[str, int] = msgspec.field(default_factory=dict)  # saga id -> its SagaStarted seq
    earlier: list[Explanation] = msgspec.field(default_factory=list)


def _saga_pod(started: SagaStarted) -> tuple[str, str, str]:
    """(namespace, name, uid) of the pod a scheduler saga is about ("" when it is about none)."""
    inp = started.input
    if "pod_name" in inp:  # Reallocation
        return str(inp.get("pod_namespace", "")), str(inp["pod_name"]), str(inp.get("pod_uid", ""))
    if started.saga_type == "PodScheduling":
        return str(inp.get("namespace", "")), str(inp.get("name", "")), str(inp.get("uid", ""))
    return "", "", ""


async def collect(store: Any, namespace: str, name: str, to_seq: int | None) -> Explanation:
    """One pass over the log up to ``to_seq``: everything explain shows about the pod, per uid."""
    root = store.root
    pod_subject = f"{root}.ev.Pod.{encode_token(namespace)}.{encode_token(name)}"
    claim_prefix = f"{root}.ev.ResourceClaim.{encode_token(namespace)}."
    # KEP-3063/4381 claims (numeric ones among them): shown with the structured ones
    classic_prefix = f"{root}.ev.{CLASSIC_CLAIM}.{encode_token(namespace)}."
    event_prefix = f"{root}.ev.{EVENT_KIND}.{encode_token(namespace)}."
    saga_prefix = f"{root}.ev.{SAGA_KIND}._."
    pod_events: list[Envelope[Event]] = []
    claim_envs: dict[str, list[Envelope[Event]]] = {}
    kube_envs: list[Envelope[Event]] = []
    saga_envs: dict[str, list[Envelope[Event]]] = {}
    ours: dict[str, tuple[str, int]] = {}  # saga subject about this pod name -> (pod uid, start seq)
    async for records in store.read_raw(None, 1, to_seq):
        for rec in records:
            subject = rec.subject
            wanted = (
                subject == pod_subject
                or subject.startswith(claim_prefix)
                or subject.startswith(classic_prefix)
                or subject.startswith(event_prefix)
                or subject.startswith(saga_prefix)
            )
            if not wanted:
                continue
            try:
                env = decode(rec.data, rec.seq)
            except (DecodeError, msgspec.MsgspecError):
                continue
            if subject == pod_subject:
                pod_events.append(env)
            elif subject.startswith(claim_prefix):
                claim_envs.setdefault(decode_token(subject[len(claim_prefix) :]), []).append(env)
            elif subject.startswith(classic_prefix):
                claim_envs.setdefault(decode_token(subject[len(classic_prefix) :]), []).append(env)
            elif subject.startswith(event_prefix):
                d = env.data
                if isinstance(d, KubeEventRecorded) and d.event.involved_object.kind == "Pod":
                    if d.event.involved_object.name == name:
                        kube_envs.append(env)
            else:
                if isinstance(env.data, SagaStarted):
                    ns, pod_name, uid = _saga_pod(env.data)
                    if (ns, pod_name) == (namespace, name):
                        ours[subject] = (uid, env.seq)
                if subject in ours:
                    saga_envs.setdefault(subject, []).append(env)
    incarnations = split_pod(pod_events)
    if not incarnations:
        where = f" (up to sequence {to_seq})" if to_seq is not None else ""
        raise UserError(f'pods "{name}" not found in namespace "{namespace}": no event in the log{where}')
    views = [
        Explanation(
            namespace=namespace,
            name=name,
            uid=inc.uid,
            pod=inc.pod if not inc.deleted_seq else None,
            last=inc.pod,
            first_seq=inc.first_seq,
            deleted_seq=inc.deleted_seq,
            pod_events=inc.events,
        )
        for inc in incarnations
    ]
    by_uid = {v.uid: v for v in views if v.uid}

    def owner(uid: str, seq: int) -> Explanation | None:
        if uid in by_uid:
            return by_uid[uid]
        inc = owner_of_seq(incarnations, seq)
        return views[incarnations.index(inc)] if inc is not None else None

    for subject, envs in saga_envs.items():
        uid, started = ours[subject]
        view = owner(uid, started)
        saga = fold_view(envs)
        if view is not None and saga is not None:
            view.sagas.append(saga)
            view.saga_seqs[saga.state.saga_id] = started
    for env in kube_envs:
        assert isinstance(env.data, KubeEventRecorded)
        ev = env.data.event
        view = owner(ev.involved_object.uid, env.seq)
        if view is not None:
            view.kube_event_envs.append(env)
            view.kube_events[ev.metadata.name] = fold(
                view.kube_events.get(ev.metadata.name), env.type, env.data, env.seq
            )
    lives = {claim: claim_lives(claim, envs) for claim, envs in claim_envs.items()}
    for inc, view in zip(incarnations, views, strict=True):
        view.sagas.sort(key=lambda v: (v.created, v.state.saga_id))
        saga_ids = {v.state.saga_id for v in view.sagas}
        named = names_of(inc)
        for claim, claim_lives_ in lives.items():
            shown = [
                e for life in claim_lives_ for e in claim_events_for(inc, life, saga_ids, claim in named)
            ]
            if shown or (claim in named and not claim_lives_):
                view.claims[claim] = sorted({e.seq: e for e in shown}.values(), key=lambda e: e.seq)
        for claim in named - set(lives):
            view.claims.setdefault(claim, [])
    current = views[-1]
    current.earlier = views[:-1]
    return current
