"""The JetStream stream configurations: the event log and its dead-letter stream.

Every service applies them on start (``EventStore.ensure_stream``: create, or update to this
config), so changing a setting here reaches a running system at the next service start.

Both streams are stored S2-compressed: JSON events repeat their field names, kinds and subjects,
so they shrink several times. JetStream compresses a message block when it is sealed (full, or at
a restart), so the block being written stays plain; readers never see the difference, and a log
written before compression was on stays readable (an update turns it on for blocks sealed from
then on).
"""

from __future__ import annotations

from nats.js import api

from draflow.events.subjects import dlq_subjects, events_prefix, stored_prefix
from draflow.infra.config import Settings

__all__ = ["dlq_stream_config", "event_stream_config", "snapshot_stream_config"]


def event_stream_config(settings: Settings) -> api.StreamConfig:
    """The log: kept forever, never deleted from or purged, S2-compressed, direct gets and atomic
    batches on. Every stored event is republished on ``<root>.st.<...>`` with its stream sequence,
    so a follower of the whole log takes it from there instead of reading it back
    (:mod:`draflow.services.runtime.tail`)."""
    return api.StreamConfig(
        name=settings.stream,
        description="draflow event log",
        subjects=[f"{events_prefix(settings.root)}.>"],
        retention=api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        discard=api.DiscardPolicy.OLD,
        max_msgs=-1,
        max_bytes=-1,
        max_age=0,
        num_replicas=settings.stream_replicas,
        duplicate_window=settings.duplicate_window_s,
        deny_delete=True,
        deny_purge=True,
        allow_direct=True,
        allow_atomic=True,
        compression=api.StoreCompression.S2,
        republish=api.RePublish(
            src=f"{events_prefix(settings.root)}.>", dest=f"{stored_prefix(settings.root)}.>"
        ),
    )


def dlq_stream_config(settings: Settings) -> api.StreamConfig:
    return api.StreamConfig(
        name=settings.dlq_stream,
        description="draflow dead letters: poison events with the reason they were set aside",
        subjects=[dlq_subjects(settings.root)],
        retention=api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        num_replicas=settings.stream_replicas,
        duplicate_window=settings.duplicate_window_s,
        allow_direct=True,
        compression=api.StoreCompression.S2,
    )


def snapshot_stream_config(settings: Settings) -> api.StreamConfig:
    """Snapshots of folded state (``draflow.infra.snapshots``): each slot subject holds one
    snapshot, replaced by a rollup when the next one is written there."""
    return api.StreamConfig(
        name=f"{settings.stream}_SNAPSHOTS",
        description="draflow snapshots: folded state at a log position, so a start folds only the tail",
        subjects=[f"{settings.root}.snap.>"],
        retention=api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        num_replicas=settings.stream_replicas,
        allow_direct=True,
        allow_rollup_hdrs=True,
        compression=api.StoreCompression.S2,
    )
