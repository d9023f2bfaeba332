"""Calling the node's DRA driver plugins for a pod: one batch per driver, bounded retries.

The plan/record halves live in ``DRAManager``; this module only makes the calls in between, so the
kubelet shell (and tests) can hand in any plugin: a registered plugin's gRPC client
(``draflow.services.kubelet.plugins.client``, whose calls are awaited) or a ``DRAPlugin`` object
called in-process. A failed claim is asked for again (only the failed ones, up to ``attempts``
calls per driver); a whole call that failed (``PluginError``: the plugin is gone, timed out,
refused the call, deregistered during the call) is retried after ``retry_s``, doubling, on the
instance serving the driver by then. Whatever is still failing after that is reported and the
shell retries the whole pod later (every call is idempotent, and prepared claims are skipped).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.services.dra.kubeletplugin import PluginError
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.kubelet.manager import DRAManager, ManagerError, Plan

__all__ = ["Outcome", "prepare_pod", "unprepare_pod"]


@dataclass(slots=True)
class Outcome:
    """What happened: ``errors`` empty means every claim is (un)prepared; ``calls`` per driver."""

    errors: list[str] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


Invoke = Callable[[Any, list[ClaimRef]], Any]
Record = Callable[[Plan, str, Sequence[ClaimRef], Any], list[str]]
DEFAULT_RETRY_S = 0.1  # the wait before a failed call's first retry (it doubles)


async def _run(
    plan: Plan,
    plugins: Mapping[str, Any],
    attempts: int,
    rpc: str,
    invoke: Invoke,
    record: Record,
    retry_s: float,
) -> Outcome:
    outcome = Outcome()
    for driver in sorted(plan.batches):
        last: list[str] = []
        delay = retry_s
        for attempt in range(max(1, attempts)):
            asked = plan.outstanding(driver)
            if not asked:
                break
            if attempt and last and last[0].startswith(f"{rpc}: "):  # the whole call failed: back off
                await asyncio.sleep(delay)
                delay *= 2
            # looked up for every attempt: a plugin that restarted (or was replaced by a rolling
            # update) meanwhile is served by another instance, which the retry must reach
            plugin = plugins.get(driver)
            if plugin is None:
                last = [f"DRA driver {driver} is not registered"]
                break
            outcome.calls[driver] = outcome.calls.get(driver, 0) + 1
            try:
                response = invoke(plugin, asked)
                if inspect.isawaitable(response):
                    response = await response
            except PluginError as exc:
                last = [f"{rpc}: {exc}"]
                continue
            last = record(plan, driver, asked, response)
        if plan.outstanding(driver):
            outcome.errors.extend(last or [f"{rpc}: claims of driver {driver} still pending"])
    return outcome


async def prepare_pod(
    manager: DRAManager,
    pod: Pod,
    claims: Sequence[ResourceClaim],
    plugins: Mapping[str, Any],
    *,
    attempts: int = 3,
    retry_s: float = DEFAULT_RETRY_S,
) -> Outcome:
    """Prepare an admitted pod's claims (``admission.admit(...).claims``)."""
    try:
        plan = manager.plan_prepare(pod, claims)
    except ManagerError as exc:
        return Outcome(errors=[str(exc)])
    return await _run(
        plan,
        plugins,
        attempts,
        "NodePrepareResources",
        lambda plugin, refs: plugin.node_prepare_resources(refs),
        manager.record_prepared,
        retry_s,
    )


async def unprepare_pod(
    manager: DRAManager,
    pod_uid: str,
    namespace: str,
    claim_names: Iterable[str],
    plugins: Mapping[str, Any],
    *,
    attempts: int = 3,
    retry_s: float = DEFAULT_RETRY_S,
) -> Outcome:
    """Release a pod's claims on this node; idempotent (a second call finds nothing to do)."""
    plan = manager.plan_unprepare(pod_uid, namespace, claim_names)
    return await _run(
        plan,
        plugins,
        attempts,
        "NodeUnprepareResources",
        lambda plugin, refs: plugin.node_unprepare_resources(refs),
        manager.record_unprepared,
        retry_s,
    )
