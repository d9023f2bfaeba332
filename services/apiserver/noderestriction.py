"""NodeRestriction: what a kubelet may change, decided by the apiserver for the node that asks.

Kubelets never publish on the log. Their requests arrive on ``<root>.node.<node>.<verb>``, which
only ``kubelet-<node>``'s credential may publish to (nats-server enforces it, ``draflow.infra.auth.roles``),
so the node in the subject *is* the caller, as the ``system:node:<node>`` user is in Kubernetes.
The rules follow Kubernetes' NodeRestriction admission plugin and Node authorizer:

* its own Node (create, update, status, delete) and its own Lease in ``kube-node-lease``;
* ResourceSlices whose ``spec.nodeName`` is itself (a node plugin publishing its devices), and
  NodeResourceCapacity objects whose ``nodeName`` is itself (KEP-4381);
* Pods bound to it (``spec.nodeName``): status facts (prepared, started, containers, failed,
  succeeded), deletion, finalizers; no Pod created, none bound elsewhere touched;
* claims (structured and classic): only dropping reservations of pods bound to it, and the
  deallocation that releasing the last one brings; and, for a driver's node plugin (KEP-4817), the
  ``status.devices`` entries of devices whose pool is on the node, nothing else of the status;
* Kubernetes Events; reading anything.

A refusal is a 403 ``Forbidden`` in the apiserver's words (``pods "p" is forbidden: node "n-2" can
only update pod status for pods with spec.nodeName set to itself``) and appends nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from draflow.events.api.classic_v1alpha1 import CLAIM_KIND as CLASSIC_CLAIM
from draflow.events.api.coordination_v1 import NODE_LEASE_NAMESPACE
from draflow.events.dra import (
    ClaimDeallocated,
    ClaimReservationsReleased,
    PodFailed,
    PodResourcesPrepared,
    PodStarted,
    PodSucceeded,
)
from draflow.events.envelope import Event
from draflow.events.node import LeaseRenewed, PodContainerStatusesReported
from draflow.events.union import event_class
from draflow.projections.objects import ObjectIndex
from draflow.services.runtime.protocol import (
    AppendEventsRequest,
    ApplyRequest,
    DeleteRequest,
    FinalizeRequest,
    StatusError,
    StatusRequest,
    qualified_resource,
)

__all__ = ["NodeRestriction", "decode_events"]

_POD_FACTS = (PodResourcesPrepared, PodStarted, PodContainerStatusesReported, PodFailed, PodSucceeded)
_DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
_LEASE = "can only access node lease with the same name as the requesting node"
_PODS_ON_NODE = "pod-namespace-node"
_SLICES_ON_NODE = "resourceslice-node"


def _pod_node(pod: Any) -> tuple[tuple[str, str], ...]:
    node = pod.spec.node_name
    return ((pod.metadata.namespace, node),) if node else ()


def _slice_node(slc: Any) -> tuple[str, ...]:
    node = slc.spec.node_name
    return (node,) if node else ()


def forbidden(kind: str, name: str, reason: str) -> StatusError:
    """Kubernetes' admission refusal: ``<resource> "<name>" is forbidden: <reason>``."""
    return StatusError.of(403, "Forbidden", f'{qualified_resource(kind)} "{name}" is forbidden: {reason}')


def decode_events(raw: Sequence[Any]) -> list[Event]:
    """Each event of an append request by its ``type`` tag; an unknown type is a 400."""
    out: list[Event] = []
    for item in raw:
        name = item.get("type") if isinstance(item, dict) else None
        cls = event_class(name) if isinstance(name, str) else None
        if cls is None:
            raise StatusError.of(400, "BadRequest", f"append: unknown event type {name!r}")
        try:
            out.append(msgspec.convert(item, cls))
        except msgspec.ValidationError as exc:
            raise StatusError.of(400, "BadRequest", f"append: invalid {name}: {exc}") from None
    return out


class NodeRestriction:
    """Admits node requests against the apiserver's current objects (``index``)."""

    def __init__(self, index: ObjectIndex) -> None:
        self.index = index
        # a node's pods and slices by key: a scan of every pod or slice per kubelet write would
        # cost in proportion to the cluster's size on every pod's path
        index.add_index(_PODS_ON_NODE, "Pod", _pod_node)
        index.add_index(_SLICES_ON_NODE, "ResourceSlice", _slice_node)

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def user(node: str) -> str:
        return f"system:node:{node}"

    def _cannot(self, node: str, verb: str, kind: str, name: str, namespace: str) -> StatusError:
        """The Node authorizer's answer for a kind no node may write."""
        resource = qualified_resource(kind)
        plural, _, group = resource.partition(".")
        where = f' in the namespace "{namespace}"' if namespace else ""
        return forbidden(
            kind,
            name,
            f'User "{self.user(node)}" cannot {verb} resource "{plural}" in API group "{group}"{where}',
        )

    def _pod_on(self, node: str, namespace: str, name: str, what: str) -> Any:
        pod = self._get("Pod", namespace or "default", name)
        if pod is None:
            return None
        if pod.spec.node_name != node:
            reason = f'node "{node}" can only {what} with spec.nodeName set to itself'
            raise forbidden("Pod", name, reason)
        return pod

    def _get(self, kind: str, namespace: str, name: str) -> Any:
        return self.index.get(kind, namespace, name)

    def _pod_uids_on(self, node: str, namespace: str) -> set[str]:
        pods: list[Any] = self.index.by_index(_PODS_ON_NODE, (namespace, node))
        return {p.metadata.uid for p in pods}

    # -- requests -----------------------------------------------------------------------------

    def admit(self, node: str, verb: str, req: Any) -> None:
        """Raise a 403 StatusError unless node ``node`` may make this request."""
        if verb in ("get", "list", "event"):
            return
        if verb in ("apply", "create"):
            assert isinstance(req, ApplyRequest)
            for item in req.items:
                self._admit_object(node, "create" if verb == "create" else "update", item.manifest)
        elif verb == "status":
            assert isinstance(req, StatusRequest)
            self._admit_status(node, req)
        elif verb == "delete":
            assert isinstance(req, DeleteRequest)
            for d in req.items:
                if d.kind in ("Node", "nodes") and d.name == node:
                    continue
                if d.kind in ("Pod", "pods", "pod"):
                    self._pod_on(node, d.namespace, d.name, "delete pods")
                    continue
                if d.kind in ("NodeResourceCapacity", "noderesourcecapacities"):
                    self._own_capacity(node, d.name)
                    continue
                raise self._cannot(node, "delete", d.kind, d.name, d.namespace)
        elif verb == "finalize":
            assert isinstance(req, FinalizeRequest)
            self._admit_finalize(node, req)
        elif verb == "append":
            assert isinstance(req, AppendEventsRequest)
            self.admit_events(node, req.kind, req.namespace, req.name, decode_events(req.events))
        else:
            raise StatusError.of(404, "NotFound", f"unknown verb {verb!r}")

    def _admit_object(self, node: str, verb: str, manifest: Any) -> None:
        if not isinstance(manifest, dict):
            raise StatusError.of(400, "BadRequest", "apply: each item must be an object")
        kind = str(manifest.get("kind", ""))
        meta: dict[str, Any] = manifest["metadata"] if isinstance(manifest.get("metadata"), dict) else {}
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
        if kind == "Node":
            if name != node:
                raise forbidden(kind, name, f'node "{node}" is not allowed to modify node "{name}"')
            return
        if kind == "Lease":
            if namespace != NODE_LEASE_NAMESPACE or name != node:
                raise forbidden(kind, name, _LEASE)
            return
        if kind == "ResourceSlice":
            spec: dict[str, Any] = manifest["spec"] if isinstance(manifest.get("spec"), dict) else {}
            got = spec.get("nodeName") or ""
            if got != node:
                raise forbidden(
                    kind,
                    name,
                    "can only create ResourceSlice with the same NodeName as the requesting node, "
                    f"expected {node}, got {got}",
                )
            return
        if kind == "NodeResourceCapacity":  # KEP-4381: the node's capacity, as its ResourceSlices
            got = manifest.get("nodeName") or ""
            if got != node:
                raise forbidden(
                    kind,
                    name,
                    "can only create NodeResourceCapacity with the same NodeName as the requesting node, "
                    f"expected {node}, got {got}",
                )
            self._own_capacity(node, name)
            return
        raise self._cannot(node, verb, kind, name, namespace)

    def _own_capacity(self, node: str, name: str) -> None:
        existing = self._get("NodeResourceCapacity", "", name)
        other = getattr(existing, "node_name", node) if existing is not None else node
        if other != node:
            reason = f'node "{node}" cannot modify the capacity of node "{other}"'
            raise forbidden("NodeResourceCapacity", name, reason)

    def _admit_status(self, node: str, req: StatusRequest) -> None:
        if req.kind in ("Node", "nodes"):
            if req.name != node:
                raise forbidden("Node", req.name, f'node "{node}" is not allowed to modify node "{req.name}"')
            return
        if req.kind in ("Pod", "pods", "pod"):
            self._pod_on(node, req.namespace, req.name, "update pod status for pods")
            return
        if req.kind in ("ResourceClaim", "resourceclaims", "resourceclaim"):
            self._admit_device_status(node, req)
            return
        raise self._cannot(node, "update", req.kind, req.name, req.namespace)

    def _local_pools(self, node: str) -> set[tuple[str, str]]:
        slices: list[Any] = self.index.by_index(_SLICES_ON_NODE, node)
        return {(s.spec.driver, s.spec.pool.name) for s in slices}

    def _admit_device_status(self, node: str, req: StatusRequest) -> None:
        """KEP-4817: a driver's node plugin reports ``status.devices`` of the devices it prepared.
        A node may change nothing else in a claim's status, and only the entries of devices whose
        pool is on itself (a ResourceSlice of that driver and pool with its ``nodeName``)."""
        name, namespace = req.name, req.namespace or "default"
        claim = self._get("ResourceClaim", namespace, name)
        if claim is None:
            return  # the status write itself answers 404
        try:
            new = msgspec.convert(req.status, type(claim.status))
        except msgspec.ValidationError:
            return  # the status write itself refuses what does not decode
        if msgspec.structs.replace(new, devices=claim.status.devices) != claim.status:
            raise forbidden(
                "ResourceClaim", name, f'node "{node}" can only update status.devices of a ResourceClaim'
            )
        before = {(d.driver, d.pool, d.device, d.share_id or ""): d for d in claim.status.devices}
        after = {(d.driver, d.pool, d.device, d.share_id or ""): d for d in new.devices}
        local = self._local_pools(node)
        for key in before.keys() | after.keys():
            if before.get(key) != after.get(key) and key[:2] not in local:
                driver, pool, device, _ = key
                raise forbidden(
                    "ResourceClaim",
                    name,
                    f'node "{node}" can only update the status of devices on itself, '
                    f"not {driver}/{pool}/{device}",
                )

    def _admit_finalize(self, node: str, req: FinalizeRequest) -> None:
        if req.kind in ("Pod", "pods", "pod"):
            self._pod_on(node, req.namespace, req.name, "update pods")
            return
        if req.kind == "ResourceClaim" and not req.add and set(req.remove) <= {_DELETE_PROTECTION}:
            claim = self._get("ResourceClaim", req.namespace or "default", req.name)
            # the protection of a claim nobody uses any more: what a kubelet's release leaves
            if claim is None or (claim.status.allocation is None and not claim.status.reserved_for):
                return
        raise self._cannot(node, "update", req.kind, req.name, req.namespace)

    def admit_events(self, node: str, kind: str, namespace: str, name: str, events: Sequence[Event]) -> None:
        """Domain facts a kubelet appends to one object."""
        if not events:
            raise StatusError.of(400, "BadRequest", "append: no events")
        if kind == "Pod":
            for ev in events:
                if not isinstance(ev, _POD_FACTS):
                    raise self._cannot(node, "update", kind, name, namespace)
                if isinstance(ev, PodResourcesPrepared) and ev.node_name not in ("", node):
                    reason = f'node "{node}" cannot prepare resources for node "{ev.node_name}"'
                    raise forbidden(kind, name, reason)
            self._pod_on(node, namespace, name, "update pod status for pods")
            return
        if kind == "Lease":
            if namespace != NODE_LEASE_NAMESPACE or name != node:
                raise forbidden(kind, name, _LEASE)
            if not all(isinstance(ev, LeaseRenewed) for ev in events):
                raise self._cannot(node, "update", kind, name, namespace)
            return
        if kind == "ResourceClaim":
            self._admit_claim_release(node, namespace, name, events)
            return
        if kind == CLASSIC_CLAIM:
            self._admit_classic_release(node, namespace, name, events)
            return
        raise self._cannot(node, "update", kind, name, namespace)

    def _released_only_own(
        self, node: str, kind: str, namespace: str, name: str, uids: Iterable[str]
    ) -> set[str]:
        released = set(uids)
        if not released <= self._pod_uids_on(node, namespace):
            reason = f'node "{node}" can only release reservations of pods bound to itself'
            raise forbidden(kind, name, reason)
        return released

    def _admit_claim_release(self, node: str, namespace: str, name: str, events: Sequence[Event]) -> None:
        claim = self._get("ResourceClaim", namespace, name)
        if claim is None:
            return  # nothing to change: the append's concurrency check refuses it
        released: set[str] = set()
        for ev in events:
            if isinstance(ev, ClaimReservationsReleased):
                released |= self._released_only_own(node, "ResourceClaim", namespace, name, ev.uids)
            elif isinstance(ev, ClaimDeallocated):  # the last reservations may leave with it
                released |= self._released_only_own(node, "ResourceClaim", namespace, name, ev.released)
                remaining = {r.uid for r in claim.status.reserved_for} - released
                if not released or remaining:
                    raise forbidden(
                        "ResourceClaim",
                        name,
                        f'node "{node}" can only deallocate a claim by releasing its last reservation',
                    )
            else:
                raise self._cannot(node, "update", "ResourceClaim", name, namespace)

    def _admit_classic_release(self, node: str, namespace: str, name: str, events: Sequence[Event]) -> None:
        claim = self._get(CLASSIC_CLAIM, namespace, name)
        if claim is None:
            return
        old = msgspec.to_builtins(claim.status)
        for ev in events:
            status = getattr(ev, "status", None)
            if type(ev).type_name() != f"{CLASSIC_CLAIM}StatusUpdated" or status is None:
                raise self._cannot(node, "update", CLASSIC_CLAIM, name, namespace)
            new = msgspec.to_builtins(status)
            kept = new.get("reservedFor") or []
            before = old.get("reservedFor") or []
            dropped = {r.get("uid", "") for r in before if r not in kept}
            same_otherwise = {**old, "reservedFor": kept} == {**new, "reservedFor": kept}
            if not same_otherwise or any(r not in before for r in kept):
                raise self._cannot(node, "update", CLASSIC_CLAIM, name, namespace)
            self._released_only_own(node, CLASSIC_CLAIM, namespace, name, dropped)
            old = new
