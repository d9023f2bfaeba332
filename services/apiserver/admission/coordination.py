"""Validation of ``coordination.k8s.io/v1`` Lease (``pkg/apis/coordination/validation``).

Upstream's rules and wording: a DNS-subdomain name, ``leaseDurationSeconds`` > 0,
``leaseTransitions`` >= 0, a known ``strategy`` (or a qualified custom one; the path repeats
``strategy`` as upstream's does), ``preferredHolder`` only with a strategy. ``acquireTime`` and
``renewTime`` must be RFC 3339 timestamps (upstream refuses anything else when decoding).
"""

from __future__ import annotations

from events.api.coordination_v1 import Lease
from services.dra.validation import names
from services.dra.validation.errs import Errs
from services.dra.validation.meta import validate_meta_update, validate_object_meta

__all__ = ["LEASE_STRATEGIES", "validate_lease"]

LEASE_STRATEGIES = ("OldestEmulationVersion",)


def validate_lease(errs: Errs, obj: Lease, old: Lease | None) -> None:
    validate_object_meta(errs, obj.metadata, namespaced=True, name_check=names.dns1123_subdomain)
    if old is not None:
        validate_meta_update(errs, obj.metadata, old.metadata)
    spec = obj.spec
    if spec.lease_duration_seconds is not None and spec.lease_duration_seconds <= 0:
        errs.invalid("spec.leaseDurationSeconds", spec.lease_duration_seconds, "must be greater than 0")
    if spec.lease_transitions is not None and spec.lease_transitions < 0:
        errs.invalid("spec.leaseTransitions", spec.lease_transitions, "must be greater than or equal to 0")
    if spec.strategy is not None:
        at = "spec.strategy.strategy"
        if "/" not in spec.strategy:
            if spec.strategy not in LEASE_STRATEGIES:
                errs.not_supported(at, spec.strategy, LEASE_STRATEGIES)
        else:
            errs.messages(at, spec.strategy, names.qualified_name(spec.strategy))
    if spec.preferred_holder and not spec.strategy:
        errs.forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined")
    for field, value in (("acquireTime", spec.acquire_time), ("renewTime", spec.renew_time)):
        if value is not None and not names.is_rfc3339(value):
            errs.invalid(f"spec.{field}", value, "must be an RFC 3339 timestamp")
