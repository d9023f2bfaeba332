"""Classic DRA (KEP-3063) in the scheduler: the ``ClassicDynamicResources`` plugin and its feed."""

from __future__ import annotations

from draflow.services.scheduler.plugins.classic.plugin import NAME, ClassicDynamicResources

__all__ = ["NAME", "ClassicDynamicResources"]
