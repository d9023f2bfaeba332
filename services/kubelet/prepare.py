"""Calling the node's DRA driver plugins for a pod: one batch per driver, bounded retries.

The plan/record halves live in ``DRAManager``; this module only makes the calls in between, so the
kubelet shell (and tests) can hand in any ``DRAPlugin`` — the in-process example driver now, a gRPC
client later. A failed claim is asked for again (only the failed ones, up to ``attempts`` calls per
driver); whatever is still failing after that is reported and the shell retries the whole pod later
(every call is idempotent, and prepared claims are skipped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from events.api.core_v1 import Pod
from events.api.resource_v1 import ResourceClaim
from services.dra.kubeletplugin import DRAPlugin, PluginError
from services.dra.resourceclaim import ClaimRef
from services.kubelet.manager import DRAManager, ManagerError, Plan

__all__ = ["Outcome", "prepare_pod", "unprepare_pod"]


@dataclass(slots=True)
class Outcome:
    """What happened: ``errors`` empty means every claim is (un)prepared; ``calls`` per driver."""

    errors: list[str] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


Invoke = Callable[[DRAPlugin, list[ClaimRef]], Any]
Record = Callable[[Plan, str, Sequence[ClaimRef], Any], list[str]]


def _run(
    plan: Plan, plugins: Mapping[str, DRAPlugin], attempts: int, rpc: str, invoke: Invoke, record: Record
) -> Outcome:
    outcome = Outcome()
    for driver in sorted(plan.batches):
        plugin = plugins.get(driver)
        if plugin is None:
            outcome.errors.append(f"DRA driver {driver} is not registered")
            continue
        last: list[str] = []
        for _ in range(max(1, attempts)):
            asked = plan.outstanding(driver)
            if not asked:
                break
            outcome.calls[driver] = outcome.calls.get(driver, 0) + 1
            try:
                response = invoke(plugin, asked)
            except PluginError as exc:
                last = [f"{rpc}: {exc}"]
                continue
            last = record(plan, driver, asked, response)
        if plan.outstanding(driver):
            outcome.errors.extend(last or [f"{rpc}: claims of driver {driver} still pending"])
    return outcome


def prepare_pod(
    manager: DRAManager,
    pod: Pod,
    claims: Sequence[ResourceClaim],
    plugins: Mapping[str, DRAPlugin],
    *,
    attempts: int = 3,
) -> Outcome:
    """Prepare an admitted pod's claims (``admission.admit(...).claims``)."""
    try:
        plan = manager.plan_prepare(pod, claims)
    except ManagerError as exc:
        return Outcome(errors=[str(exc)])
    return _run(
        plan,
        plugins,
        attempts,
        "NodePrepareResources",
        lambda plugin, refs: plugin.node_prepare_resources(refs),
        manager.record_prepared,
    )


def unprepare_pod(
    manager: DRAManager,
    pod_uid: str,
    namespace: str,
    claim_names: Iterable[str],
    plugins: Mapping[str, DRAPlugin],
    *,
    attempts: int = 3,
) -> Outcome:
    """Release a pod's claims on this node; idempotent (a second call finds nothing to do)."""
    plan = manager.plan_unprepare(pod_uid, namespace, claim_names)
    return _run(
        plan,
        plugins,
        attempts,
        "NodeUnprepareResources",
        lambda plugin, refs: plugin.node_unprepare_resources(refs),
        manager.record_unprepared,
    )
