"""A profile: the plugins of one scheduler, sorted into extension points once."""

from __future__ import annotations

from collections.abc import Sequence

from draflow.services.scheduler.framework.interface import (
    DeferredFilterPlugin,
    EventRegistration,
    FilterPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    ReservePlugin,
    ScorePlugin,
)

__all__ = ["Profile"]


class Profile:
    """Plugins in configuration order; each extension point keeps that order (Filter order decides
    which plugin a node's rejection is attributed to, as upstream stops at the first failure)."""

    def __init__(self, plugins: Sequence[object]) -> None:
        names = [getattr(p, "name", "") for p in plugins]
        if len(set(names)) != len(names) or "" in names:
            raise ValueError(f"plugins need unique, non-empty names: {names}")
        self.plugins = list(plugins)
        self.pre_enqueue = [p for p in plugins if isinstance(p, PreEnqueuePlugin)]
        self.pre_filter = [p for p in plugins if isinstance(p, PreFilterPlugin)]
        self.filter = [p for p in plugins if isinstance(p, FilterPlugin)]
        self.deferred = [p for p in plugins if isinstance(p, DeferredFilterPlugin)]
        self.post_filter = [p for p in plugins if isinstance(p, PostFilterPlugin)]
        self.score = [p for p in plugins if isinstance(p, ScorePlugin)]
        self.reserve = [p for p in plugins if isinstance(p, ReservePlugin)]
        self.pre_bind = [p for p in plugins if isinstance(p, PreBindPlugin)]
        self.registrations: dict[str, list[EventRegistration]] = {}
        for plugin, name in zip(plugins, names, strict=True):
            register = getattr(plugin, "events_to_register", None)
            self.registrations[name] = list(register()) if register else []

    def plugin(self, name: str) -> object:
        for p in self.plugins:
            if getattr(p, "name", None) == name:
                return p
        raise KeyError(name)
