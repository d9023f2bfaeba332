"""Apply DeviceTaintRules to ResourceSlices (what upstream's slice tracker hands the scheduler).

A rule's taint is appended to every device its selector matches (driver, pool and device name,
each only when set). Slices no rule touches are returned as the same objects, so the allocator's
slice cache keeps its prepared data for them.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from events.api.resource_v1 import DeviceTaintRule, ResourceSlice

__all__ = ["apply_taint_rules"]


def apply_taint_rules(
    slices: Sequence[ResourceSlice], rules: Sequence[DeviceTaintRule]
) -> list[ResourceSlice]:
    if not rules:
        return list(slices)
    out: list[ResourceSlice] = []
    for slc in slices:
        spec = slc.spec
        devices = list(spec.devices)
        changed = False
        for rule in rules:
            sel = rule.spec.device_selector
            if sel is not None:
                if sel.driver is not None and sel.driver != spec.driver:
                    continue
                if sel.pool is not None and sel.pool != spec.pool.name:
                    continue
            for i, dev in enumerate(devices):
                if sel is not None and sel.device is not None and sel.device != dev.name:
                    continue
                devices[i] = msgspec.structs.replace(dev, taints=(*dev.taints, rule.spec.taint))
                changed = True
        if changed:
            slc = msgspec.structs.replace(slc, spec=msgspec.structs.replace(spec, devices=tuple(devices)))
        out.append(slc)
    return out
