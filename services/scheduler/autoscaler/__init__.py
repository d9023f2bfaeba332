"""``draflow simulate``'s pure core: node groups, fictional nodes and Cluster Autoscaler's
binpacking estimate, over the scheduler's own plugins (``framework/simulation.py``)."""

from draflow.services.scheduler.autoscaler.estimator import (
    DeviceResult,
    Estimate,
    GroupResult,
    Move,
    PodResult,
    RemoveResult,
    estimate,
)
from draflow.services.scheduler.autoscaler.nodegroups import (
    CAPACITY_ANNOTATION,
    NodeGroup,
    NodeTemplate,
    TemplateError,
    instantiate,
    template_from_objects,
)
from draflow.services.scheduler.autoscaler.snapshot import is_pending, new_simulation, queue_order

__all__ = [
    "CAPACITY_ANNOTATION",
    "DeviceResult",
    "Estimate",
    "GroupResult",
    "Move",
    "NodeGroup",
    "NodeTemplate",
    "PodResult",
    "RemoveResult",
    "TemplateError",
    "estimate",
    "instantiate",
    "is_pending",
    "new_simulation",
    "queue_order",
    "template_from_objects",
]
