"""Every event type draflow writes, in one place: the tagged union the codec decodes the log with.

A reader finds every event here. Adding an event type = defining it in its module
(``draflow.events.dra``, ``draflow.events.guard``, ``draflow.events.node``, ``draflow.events.saga``,
``draflow.events.objects``) and listing it below; nothing registers itself on import.
``AnyEvent`` is the msgspec tagged union (``data.type`` picks the class).

:func:`register_events` adds event types that are not draflow's own (tests, benchmarks, an
out-of-tree extension): an explicit call, checked for clashing type names.
"""

from __future__ import annotations

from typing import Union

from draflow.events.dra import (
    ClaimAllocated,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodBound,
    PodClaimStatusesRecorded,
    PodExtendedResourceClaimStatusRecorded,
    PodFailed,
    PodResourcesPrepared,
    PodStarted,
    PodSucceeded,
    PodUnschedulable,
)
from draflow.events.envelope import Event
from draflow.events.guard import GuardReleased, GuardTaken
from draflow.events.node import (
    LeaseRenewed,
    NodeHeartbeatLost,
    NodeTainted,
    NodeUntainted,
    PodContainerStatusesReported,
    PodDisruptionTargeted,
)
from draflow.events.numeric import (
    NumericCapacityCommitted,
    NumericClaimAllocated,
    NumericClaimConditionRecorded,
    NumericClaimDeallocated,
    NumericClaimReservationsReleased,
    NumericClaimReserved,
)
from draflow.events.objects import (
    CUSTOM_EVENT_TYPES,
    KubeEventDeleted,
    KubeEventRecorded,
    OwnerReferencesRemoved,
    object_event_types,
)
from draflow.events.saga import (
    SagaCompensated,
    SagaCompensationFailed,
    SagaCompleted,
    SagaStarted,
    SagaStepCompensated,
    SagaStepCompleted,
    SagaStepFailed,
    SagaStepStarted,
)

__all__ = ["EVENT_TYPES", "AnyEvent", "event_class", "event_types", "register_events", "registry_version"]

EVENT_TYPES: tuple[type[Event], ...] = (
    # DRA facts on claims and pods (draflow.events.dra)
    ClaimAllocated,
    ClaimReserved,
    ClaimReservationsReleased,
    ClaimDeallocated,
    PodBound,
    PodUnschedulable,
    PodClaimStatusesRecorded,
    PodExtendedResourceClaimStatusRecorded,
    PodResourcesPrepared,
    PodStarted,
    PodFailed,
    PodSucceeded,
    # KEP-4381 numeric claims (draflow.events.numeric)
    NumericClaimAllocated,
    NumericClaimReserved,
    NumericClaimDeallocated,
    NumericClaimConditionRecorded,
    NumericClaimReservationsReleased,
    NumericCapacityCommitted,
    # node and pod facts of the node plane (draflow.events.node)
    PodContainerStatusesReported,
    LeaseRenewed,
    NodeHeartbeatLost,
    NodeTainted,
    NodeUntainted,
    PodDisruptionTargeted,
    # guard facts: decisions serialised on a guarded resource (draflow.events.guard)
    GuardTaken,
    GuardReleased,
    # saga state (draflow.events.saga)
    SagaStarted,
    SagaStepStarted,
    SagaStepCompleted,
    SagaStepFailed,
    SagaStepCompensated,
    SagaCompleted,
    SagaCompensated,
    SagaCompensationFailed,
    # API objects (draflow.events.objects): Kubernetes Events, owner references, and the lifecycle facts
    # KApplied / KStatusUpdated / KFinalizersChanged / KDeletionRequested / KDeleted of every
    # served kind K (generated from the kind table, draflow.events.api.kinds)
    KubeEventRecorded,
    KubeEventDeleted,
    OwnerReferencesRemoved,
    *object_event_types(),
    # custom objects (kinds served by CustomResourceDefinitions), any kind
    *CUSTOM_EVENT_TYPES,
)

AnyEvent = Union[EVENT_TYPES]  # type: ignore[valid-type]  # noqa: UP007  (msgspec's tagged union)


def _index(types: tuple[type[Event], ...]) -> dict[str, type[Event]]:
    out: dict[str, type[Event]] = {}
    for cls in types:
        _check(out, cls)
        out[cls.type_name()] = cls
    return out


def _check(known: dict[str, type[Event]], cls: type[Event]) -> None:
    name = cls.type_name()
    existing = known.get(name)
    if existing is not None and existing is not cls:
        raise TypeError(
            f"event type {name!r} is already registered by {existing.__module__}.{existing.__qualname__}"
        )
    if not isinstance(cls.SCHEMA, int) or cls.SCHEMA < 1:
        raise TypeError(f"event type {name!r}: SCHEMA must be an int >= 1")


_BY_NAME = _index(EVENT_TYPES)
_version = 0


def register_events(*classes: type[Event]) -> None:
    """Decode these event types too (not draflow's own: tests, benchmarks, extensions)."""
    global _version
    for cls in classes:
        _check(_BY_NAME, cls)
    for cls in classes:
        if _BY_NAME.get(cls.type_name()) is not cls:
            _BY_NAME[cls.type_name()] = cls
            _version += 1


def event_class(type_name: str) -> type[Event] | None:
    """The class of a type name (None for a type this process does not know)."""
    return _BY_NAME.get(type_name)


def event_types() -> dict[str, type[Event]]:
    """Every known event type by name: ``EVENT_TYPES`` and the registered extras."""
    return dict(_BY_NAME)


def registry_version() -> int:
    """Bumped by every :func:`register_events`, so cached union decoders know when to rebuild."""
    return _version
