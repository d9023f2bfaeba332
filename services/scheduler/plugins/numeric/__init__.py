"""KEP-4381 numeric parameters in the scheduler: the ``NumericResources`` plugin, its books and feed."""

from __future__ import annotations

from draflow.services.scheduler.plugins.numeric.plugin import NAME, ConditionAsk, NumericResources

__all__ = ["NAME", "ConditionAsk", "NumericResources"]
