"""What the kubelet does with classic claims (KEP-3063 "kubelet" section), as pure functions.

* :func:`admit_on_node`: a Pod whose classic claims are missing, not owned (template claims), not
  allocated, not reserved for it or not usable on this node must not run; each reason is one line
  for the Pod's Warning event (a scheduler without DRA support may have placed it).
* :func:`prepare_batches`: the ``NodePrepareResource`` calls, batched per driver (each claim once,
  even when several containers use it).
* :func:`container_devices`: after preparing, the CDI device names each container receives (only
  the claims it lists under ``resources.claims``).
"""

from __future__ import annotations

from collections.abc import Mapping

from events.api import classic_v1alpha1 as cv
from events.api import core_v1 as c1
from events.api.classic_pod import pod_claims
from services.dra.classic import claims as cl
from services.dra.classic.nodeselect import selector_matches
from services.dra.classic.podclaims import pod_claim_refs
from services.dra.kubeletplugin import PrepareResult
from services.dra.resourceclaim import ClaimRef, is_controlled_by

__all__ = ["admit_on_node", "container_devices", "prepare_batches"]


def admit_on_node(pod: c1.Pod, claims: Mapping[str, cv.ResourceClaim], node: c1.Node) -> list[str]:
    """Reasons to refuse the Pod on ``node`` (empty: it may start)."""
    reasons = []
    for ref in pod_claim_refs(pod):
        claim = claims.get(ref.claim_name)
        if claim is None:
            reasons.append(f"resourceclaim {ref.claim_name} does not exist")
            continue
        if ref.from_template and not is_controlled_by(claim.metadata, pod.metadata.uid):
            reasons.append(f"resourceclaim {ref.claim_name} was not created for this pod")
        elif cl.phase(claim) != cv.ALLOCATED:
            reasons.append(f"resourceclaim {ref.claim_name} is not allocated")
        elif not any(u.uid == pod.metadata.uid for u in claim.status.reserved_for):
            reasons.append(f"pod is not in reservedFor of resourceclaim {ref.claim_name}")
        elif not selector_matches(
            cl.scheduling(claim).driver.available_on_nodes, node.metadata.name, node.metadata.labels
        ):
            reasons.append(f"resourceclaim {ref.claim_name} is not available on node {node.metadata.name}")
    return reasons


def prepare_batches(pod: c1.Pod, claims: Mapping[str, cv.ResourceClaim]) -> dict[str, list[ClaimRef]]:
    """Per driver, the claims to prepare for the Pod (run :func:`admit_on_node` first)."""
    out: dict[str, list[ClaimRef]] = {}
    seen: set[str] = set()
    for ref in pod_claim_refs(pod):
        claim = claims.get(ref.claim_name)
        if claim is None or claim.metadata.uid in seen:
            continue
        seen.add(claim.metadata.uid)
        out.setdefault(claim.status.driver_name, []).append(
            ClaimRef(namespace=claim.metadata.namespace, uid=claim.metadata.uid, name=claim.metadata.name)
        )
    return out


def container_devices(
    pod: c1.Pod, claims: Mapping[str, cv.ResourceClaim], prepared: Mapping[str, PrepareResult]
) -> dict[str, tuple[str, ...]]:
    """Container name -> CDI device names, from the prepare results keyed by claim uid."""
    kep = pod_claims(pod)
    if kep is None:
        return {}
    by_entry = {r.pod_claim_name: r.claim_name for r in pod_claim_refs(pod)}
    out: dict[str, tuple[str, ...]] = {}
    for used in (kep.init_containers, kep.containers):
        for container, entries in used.items():
            ids: list[str] = []
            for entry in entries:
                claim = claims.get(by_entry.get(entry, ""))
                result = prepared.get(claim.metadata.uid) if claim is not None else None
                if result is not None and not result.error:
                    ids.extend(i for d in result.devices for i in d.cdi_device_ids if i not in ids)
            out[container] = tuple(ids)
    return out
