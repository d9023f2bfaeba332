"""The ``DynamicResources`` scheduler plugin (see ``plugin.py``)."""

from services.scheduler.plugins.dynamicresources.plugin import (
    CANNOT_ALLOCATE,
    NAME,
    NOT_AVAILABLE,
    DRAState,
    DynamicResources,
)
from services.scheduler.plugins.dynamicresources.prebind import (
    PreBindConflict,
    deallocated,
    prebind_claim,
    unreserve_claim,
)

__all__ = [
    "CANNOT_ALLOCATE",
    "NAME",
    "NOT_AVAILABLE",
    "DRAState",
    "DynamicResources",
    "PreBindConflict",
    "deallocated",
    "prebind_claim",
    "unreserve_claim",
]
