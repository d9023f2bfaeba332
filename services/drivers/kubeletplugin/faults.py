"""Failures on purpose, for tests and demos: any driver's plugin wrapped so it fails on demand.

``FailureSwitches`` says what fails: the next N whole calls (a gRPC error, nothing handled), the
claims named (a per-claim error in the answer), or every call after a delay (a plugin that hangs,
to be killed mid-call). ``Faulty`` applies them around any ``DRAPlugin``; the plugin's admin
endpoint (``draflow.services.drivers.kubeletplugin.admin``) changes them from outside while it runs,
so an e2e test drives a plugin process the way upstream's e2e tests drive their test driver.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from draflow.services.dra.kubeletplugin import DRAPlugin, PluginError, PrepareResult
from draflow.services.dra.resourceclaim import ClaimRef

CALLS_KEPT = 256  # how many of the last prepare/unprepare calls are remembered

__all__ = ["FailureSwitches", "Faulty", "SwitchError"]


class SwitchError(ValueError):
    """An admin request names a switch that does not exist or gives it a value of the wrong type."""


@dataclass
class FailureSwitches:
    """Injected failures. Claims are matched by uid or name; devices by device name (drivers that
    check devices, such as gpu.example.com, read ``prepare_devices`` themselves)."""

    prepare_claims: set[str] = field(default_factory=set)
    prepare_devices: set[str] = field(default_factory=set)
    unprepare_claims: set[str] = field(default_factory=set)
    fail_prepare_calls: int = 0
    fail_unprepare_calls: int = 0
    prepare_delay_s: float = 0.0  # each NodePrepareResources waits this long before it is handled
    unhealthy_devices: set[str] = field(default_factory=set)  # reported UNHEALTHY (device names)
    # units of capacity gone from the demo hardware (frobnicator.example.com: frobnicators lost)
    capacity_lost: int = 0

    def update(self, changes: dict[str, Any]) -> None:
        """Set the switches named in ``changes`` (lists for the sets); the others keep their value."""
        known = {f.name: f for f in fields(self)}
        for name, value in changes.items():
            if name not in known:
                raise SwitchError(f"no failure switch {name!r} (known: {', '.join(sorted(known))})")
            current = getattr(self, name)
            if isinstance(current, set):
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise SwitchError(f"{name}: expected a list of claim or device names")
                setattr(self, name, set(value))
            elif type(current) is int:
                if not isinstance(value, int) or value < 0:
                    raise SwitchError(f"{name}: expected a whole number >= 0")
                setattr(self, name, value)
            else:
                if not isinstance(value, int | float) or value < 0:
                    raise SwitchError(f"{name}: expected a number of seconds >= 0")
                setattr(self, name, float(value))

    def clear(self) -> None:
        for f in fields(self):
            setattr(self, f.name, type(getattr(self, f.name))())

    def to_dict(self) -> dict[str, Any]:
        return {k: sorted(v) if isinstance(v, set) else v for k, v in asdict(self).items()}


class Faulty:
    """``plugin`` with ``switches`` applied in front of it (claim- and call-level failures)."""

    def __init__(self, plugin: DRAPlugin, switches: FailureSwitches) -> None:
        self.plugin = plugin
        self.switches = switches
        # what was asked, failed or not: ("prepare" | "unprepare", claim uids)
        # the last calls (rpc, claim uids): a ring, so a long-running plugin keeps no entry per pod
        self.calls: collections.deque[tuple[str, tuple[str, ...]]] = collections.deque(maxlen=CALLS_KEPT)

    @property
    def driver_name(self) -> str:
        return self.plugin.driver_name

    def __getattr__(self, name: str) -> Any:  # the driver's own attributes (prepared, calls, ...)
        return getattr(self.plugin, name)

    def node_prepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        s = self.switches
        self.calls.append(("prepare", tuple(c.uid for c in claims)))
        if s.fail_prepare_calls > 0:
            s.fail_prepare_calls -= 1
            raise PluginError("injected failure: NodePrepareResources unavailable")
        failing = [ref for ref in claims if {ref.uid, ref.name} & s.prepare_claims]
        rest = [ref for ref in claims if ref not in failing]
        results = self.plugin.node_prepare_resources(rest) if rest else {}
        for ref in failing:
            results[ref.uid] = PrepareResult(
                error=f"error preparing devices for claim {ref.uid}: injected failure for claim {ref.name}"
            )
        return results

    def node_unprepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, str | None]:
        s = self.switches
        self.calls.append(("unprepare", tuple(c.uid for c in claims)))
        if s.fail_unprepare_calls > 0:
            s.fail_unprepare_calls -= 1
            raise PluginError("injected failure: NodeUnprepareResources unavailable")
        failing = [ref for ref in claims if {ref.uid, ref.name} & s.unprepare_claims]
        rest = [ref for ref in claims if ref not in failing]
        results = self.plugin.node_unprepare_resources(rest) if rest else {}
        for ref in failing:
            results[ref.uid] = f"injected failure: cannot unprepare claim {ref.name}"
        return results
