"""The garbage collector: deletes objects whose owners are gone (Kubernetes' garbagecollector).

``graph``: the pure ownership graph and decisions; ``service``: the shell over the log-folded cache.
"""

from draflow.services.garbage_collector.graph import (
    DeleteObject,
    GCAction,
    Graph,
    Item,
    RemoveFinalizer,
    RemoveOwnerReferences,
    decide,
    decide_all,
    item_of,
)

__all__ = [
    "DeleteObject",
    "GCAction",
    "Graph",
    "Item",
    "RemoveFinalizer",
    "RemoveOwnerReferences",
    "decide",
    "decide_all",
    "item_of",
]
