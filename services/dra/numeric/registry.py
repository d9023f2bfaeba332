"""The numeric models a process knows: the ones installed through the entry-point group
``draflow.numeric_models``.

Where Kubernetes asks developers to recompile kube-scheduler with an ``init`` function that
registers a builtin controller, a draflow user ``pip install``s a package declaring::

    [project.entry-points."draflow.numeric_models"]
    "memory.example.com" = "my_package.model:MODEL"

The entry point's name is the model's API group; its value is a :class:`NumericModel` or a
zero-argument callable returning one. draflow's own models (counter, partitions) are declared
the same way in its pyproject. A broken entry point is reported, never fatal: the other models
keep working and claims of the broken one say why they cannot be allocated.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

from draflow.services.dra.numeric.model import NumericModel

__all__ = ["ENTRY_POINT_GROUP", "ModelRegistry", "builtin_models", "load_models"]

ENTRY_POINT_GROUP = "draflow.numeric_models"


def builtin_models() -> list[NumericModel]:
    """draflow's own models (also declared as entry points; listed so a stale editable install
    that predates the declaration still has them)."""
    from draflow.services.dra.numeric import counter, partitions

    return [counter.MODEL, partitions.MODEL]


class ModelRegistry:
    """Models by API group, and the load problems of entry points that did not produce one."""

    def __init__(self, models: Iterable[NumericModel] = (), problems: Iterable[str] = ()) -> None:
        self.models: dict[str, NumericModel] = {}
        self.problems = list(problems)
        for m in models:
            self.add(m)

    def add(self, model: NumericModel) -> None:
        self.models[model.group] = model

    def for_api_version(self, api_version: str) -> NumericModel | None:
        group = api_version.rpartition("/")[0]
        model = self.models.get(group)
        return model if model is not None and model.serves(api_version) else None

    def groups(self) -> list[str]:
        return sorted(self.models)


def load_models(available: Iterable[EntryPoint] | None = None) -> ModelRegistry:
    """Every model of the entry-point group (``available`` replaces the installed ones: tests)."""
    registry = ModelRegistry(builtin_models() if available is None else ())
    eps = list(entry_points(group=ENTRY_POINT_GROUP) if available is None else available)
    for ep in sorted(eps, key=lambda e: e.name):
        try:
            value = ep.load()
            model = value if isinstance(value, NumericModel) else value()
        except Exception as exc:
            registry.problems.append(f"numeric model {ep.name!r} ({ep.value}): {exc}")
            continue
        if not isinstance(model, NumericModel):
            registry.problems.append(
                f"numeric model {ep.name!r} ({ep.value}): not a NumericModel but {type(model).__name__}"
            )
            continue
        if model.group != ep.name:
            registry.problems.append(
                f"numeric model {ep.name!r} ({ep.value}): declares group {model.group!r}"
            )
            continue
        registry.add(model)
    return registry
