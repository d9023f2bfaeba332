"""The kubelet's DRA manager core: which claims to prepare or unprepare, per driver, and the cache.

After upstream ``pkg/kubelet/cm/dra/manager.go``, with the calls to the drivers taken out: the
manager *plans* a batch per driver (``plan_prepare`` / ``plan_unprepare``) and *records* each
driver's answer (``record_prepared`` / ``record_unprepared``); ``services.kubelet.prepare`` makes
the calls in between. Rules kept from upstream:

* a claim is prepared once per node; more pods using it only add their uid to ``pod_uids``, and an
  already prepared claim is skipped (no driver call);
* one NodePrepareResources / NodeUnprepareResources call per driver with all its claims;
* a per-claim error, or a claim missing from the answer, fails the pod's preparation (it is retried);
* unprepare only when the last pod using the claim goes; otherwise just drop the pod's reference;
* a cached claim with the same name but another uid (the old claim still prepared) is an error.

Deviations: devices reported by a driver replace the previous report instead of being appended
(so a retried batch cannot duplicate them), and claim infos are removed after unprepare instead of
being tombstoned for late health updates (draflow has no device health stream yet).
Every change that matters after a restart is followed by a checkpoint: the caller writes
``entries()`` with ``services.kubelet.checkpoint.write_checkpoint`` whenever ``dirty`` is set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from events.api.core_v1 import Container, Pod
from events.api.resource_v1 import ResourceClaim
from services.dra.kubeletplugin import PrepareResult
from services.dra.resourceclaim import ClaimRef
from services.kubelet.state import ClaimInfo, DeviceState

__all__ = ["DRAManager", "ManagerError", "Plan"]


class ManagerError(Exception):
    """The pod's claims cannot be prepared/unprepared now (message says why)."""


@dataclass(slots=True)
class Plan:
    """Driver calls for one pod: ``batches[driver]`` claims, and what is still outstanding."""

    pod_uid: str
    batches: dict[str, list[ClaimRef]] = field(default_factory=dict)
    # claim uid -> drivers that have not answered successfully yet
    pending: dict[str, set[str]] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return not any(self.pending.values())

    def outstanding(self, driver: str) -> list[ClaimRef]:
        """The claims of ``driver``'s batch still waiting for a successful answer."""
        return [ref for ref in self.batches.get(driver, []) if driver in self.pending.get(ref.uid, set())]


class DRAManager:
    """Claim infos of this node, keyed by (namespace, claim name)."""

    def __init__(self, infos: Iterable[ClaimInfo] = ()) -> None:
        self._infos: dict[tuple[str, str], ClaimInfo] = {(i.namespace, i.claim_name): i for i in infos}
        self.dirty = False

    # -- queries -------------------------------------------------------------------------------

    def entries(self) -> list[ClaimInfo]:
        """Everything the checkpoint must hold."""
        return list(self._infos.values())

    def get(self, namespace: str, name: str) -> ClaimInfo | None:
        return self._infos.get((namespace, name))

    def referenced_pod_uids(self) -> set[str]:
        """Every pod some cached claim still counts as a user."""
        return {uid for info in self._infos.values() for uid in info.pod_uids}

    def claims_of_pod(self, pod_uid: str) -> list[tuple[str, str]]:
        """``(namespace, claim name)`` of the cached claims this pod uses (for unprepare after the
        pod object is gone, e.g. deleted while the kubelet was down)."""
        return sorted(key for key, info in self._infos.items() if pod_uid in info.pod_uids)

    def has_pod_reference(self, pod_uid: str) -> bool:
        """Whether some claim still counts this pod as a user (its unprepare is not finished)."""
        return any(pod_uid in info.pod_uids for info in self._infos.values())

    def container_cdi_devices(self, pod: Pod, container: Container) -> list[str]:
        """CDI device ids for one container, from its ``resources.claims`` (upstream ``GetResources``).

        For each pod claim the container lists: the devices of the named request, or all devices of
        the claim when no request is given. Extended-resource devices come through
        ``pod.status.extendedResourceClaimStatus.requestMappings``.
        """
        ids: list[str] = []
        statuses = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses}
        namespace = pod.metadata.namespace
        for pod_claim in pod.spec.resource_claims:
            name = pod_claim.resource_claim_name
            if name is None:
                name = statuses.get(pod_claim.name)
            if name is None:
                continue
            for ref in container.resources.claims:
                if ref.name != pod_claim.name:
                    continue
                info = self.get(namespace, name)
                if info is None:
                    raise ManagerError(f"internal error: unable to get claim info for ResourceClaim {name}")
                ids.extend(info.cdi_device_ids(ref.request))
        extended = pod.status.extended_resource_claim_status
        if extended is not None and extended.resource_claim_name:
            info = self.get(namespace, extended.resource_claim_name)
            for mapping in extended.request_mappings:
                if mapping.container_name != container.name or info is None:
                    continue
                if _requests_nonzero(container, mapping.resource_name):
                    ids.extend(info.cdi_device_ids(mapping.request_name))
        return ids

    def pod_cdi_devices(self, pod: Pod) -> dict[str, list[str]]:
        """Per container name (init containers first), the CDI ids the runtime would get."""
        return {
            c.name: self.container_cdi_devices(pod, c)
            for c in (*pod.spec.init_containers, *pod.spec.containers)
        }

    # -- prepare -------------------------------------------------------------------------------

    def plan_prepare(self, pod: Pod, claims: Sequence[ResourceClaim]) -> Plan:
        """Register the pod on its (admitted) claims and batch the unprepared ones per driver."""
        pod_uid = pod.metadata.uid
        for claim in claims:
            meta = claim.metadata
            info = self._infos.get((meta.namespace, meta.name))
            if info is not None and info.claim_uid != meta.uid:
                raise ManagerError(
                    f"old ResourceClaim with same name {meta.name} and different UID {info.claim_uid} "
                    "still exists (previous pod force-deleted?)"
                )
            if claim.status.allocation is None:
                raise ManagerError(f"ResourceClaim {meta.name}: not allocated")
        plan = Plan(pod_uid=pod_uid)
        for claim in claims:
            meta = claim.metadata
            key = (meta.namespace, meta.name)
            info = self._infos.get(key)
            if info is None:
                assert claim.status.allocation is not None
                drivers = {r.driver for r in claim.status.allocation.devices.results}
                info = ClaimInfo(
                    claim_uid=meta.uid,
                    claim_name=meta.name,
                    namespace=meta.namespace,
                    driver_state={d: [] for d in sorted(drivers)},
                )
                self._infos[key] = info
            if pod_uid not in info.pod_uids:
                info.pod_uids.add(pod_uid)
                self.dirty = True
            if info.prepared or info.claim_uid in plan.pending:
                continue
            ref = ClaimRef(namespace=meta.namespace, uid=meta.uid, name=meta.name)
            plan.pending[info.claim_uid] = set(info.driver_state)
            for driver in sorted(info.driver_state):
                plan.batches.setdefault(driver, []).append(ref)
            if not info.driver_state:
                info.prepared = True  # nothing to prepare (no results)
        return plan

    def record_prepared(
        self, plan: Plan, driver: str, asked: Sequence[ClaimRef], response: Mapping[str, PrepareResult]
    ) -> list[str]:
        """Take one NodePrepareResources answer; returns the errors (empty: all asked claims done)."""
        errors: list[str] = []
        by_uid = {ref.uid: ref for ref in asked}
        for uid in sorted(response):
            result = response[uid]
            ref = by_uid.get(uid)
            if ref is None:
                errors.append(f"NodePrepareResources returned result for unknown claim UID {uid}")
                continue
            if result.error:
                errors.append(f"NodePrepareResources failed for ResourceClaim {ref.name}: {result.error}")
                continue
            info = self._infos.get((ref.namespace, ref.name))
            if info is None or info.claim_uid != uid:
                errors.append(f"internal error: unable to get claim info for ResourceClaim {ref.name}")
                continue
            info.driver_state[driver] = [
                DeviceState(
                    pool_name=d.pool_name,
                    device_name=d.device_name,
                    request_names=d.request_names,
                    cdi_device_ids=d.cdi_device_ids,
                )
                for d in result.devices
            ]
            self.dirty = True
            drivers = plan.pending.get(uid, set())
            drivers.discard(driver)
            if not drivers:
                info.prepared = True
        skipped = sum(1 for uid in by_uid if uid not in response)
        if skipped:
            errors.append(f"NodePrepareResources skipped {skipped} ResourceClaims")
        return errors

    # -- unprepare -----------------------------------------------------------------------------

    def plan_unprepare(self, pod_uid: str, namespace: str, claim_names: Iterable[str]) -> Plan:
        """Drop the pod from shared claims; batch the claims it was the last user of per driver."""
        plan = Plan(pod_uid=pod_uid)
        for name in claim_names:
            info = self._infos.get((namespace, name))
            if info is None or pod_uid not in info.pod_uids:
                continue  # never prepared here, or already released for this pod
            if len(info.pod_uids) > 1:
                info.pod_uids.discard(pod_uid)
                self.dirty = True
                continue
            if info.claim_uid in plan.pending:
                continue
            ref = ClaimRef(namespace=info.namespace, uid=info.claim_uid, name=info.claim_name)
            plan.pending[info.claim_uid] = set(info.driver_state)
            for driver in sorted(info.driver_state):
                plan.batches.setdefault(driver, []).append(ref)
            if not info.driver_state:
                self._forget(info)
        return plan

    def record_unprepared(
        self, plan: Plan, driver: str, asked: Sequence[ClaimRef], response: Mapping[str, str | None]
    ) -> list[str]:
        """Take one NodeUnprepareResources answer; a claim all drivers released is forgotten."""
        errors: list[str] = []
        by_uid = {ref.uid: ref for ref in asked}
        for uid in sorted(response):
            ref = by_uid.get(uid)
            if ref is None:
                errors.append(f"NodeUnprepareResources returned result for unknown claim UID {uid}")
                continue
            error = response[uid]
            if error:
                errors.append(f"NodeUnprepareResources failed for ResourceClaim {ref.name}: {error}")
                continue
            drivers = plan.pending.get(uid, set())
            drivers.discard(driver)
            info = self._infos.get((ref.namespace, ref.name))
            if info is not None and info.claim_uid == uid:
                info.prepared = False
                if not drivers:
                    self._forget(info)
        skipped = sum(1 for uid in by_uid if uid not in response)
        if skipped:
            errors.append(f"NodeUnprepareResources skipped {skipped} ResourceClaims")
        return errors

    def _forget(self, info: ClaimInfo) -> None:
        self._infos.pop((info.namespace, info.claim_name), None)
        self.dirty = True


def _requests_nonzero(container: Container, resource: str) -> bool:
    value = container.resources.requests.get(resource)
    return value is not None and str(value) not in ("0", "")
