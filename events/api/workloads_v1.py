"""``apps/v1`` Deployment and ``batch/v1`` Job: stored as written; their pods come later.

Only the fields that shape the pods (replicas / parallelism / completions, selector, template)
are typed; rollout strategy, failure policies and status details are kept as decoded JSON.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from draflow.events.api.base import ApiStruct, Int32, Int64
from draflow.events.api.core_v1 import PodTemplateSpec
from draflow.events.api.meta import LabelSelector, ObjectMeta

Obj = dict[str, Any]
Objs = tuple[dict[str, Any], ...]


class DeploymentSpec(ApiStruct, frozen=True):
    replicas: Int32 | None = None
    selector: LabelSelector | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    strategy: Obj | None = None
    min_ready_seconds: Int32 = 0
    revision_history_limit: Int32 | None = None
    paused: bool = False
    progress_deadline_seconds: Int32 | None = None


class DeploymentStatus(ApiStruct, frozen=True):
    observed_generation: Int64 = 0
    replicas: Int32 = 0
    updated_replicas: Int32 = 0
    ready_replicas: Int32 = 0
    available_replicas: Int32 = 0
    unavailable_replicas: Int32 = 0
    terminating_replicas: Int32 | None = None
    conditions: Objs = ()
    collision_count: Int32 | None = None


class Deployment(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = "apps/v1"
    KIND: ClassVar[str] = "Deployment"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeploymentSpec = msgspec.field(default_factory=DeploymentSpec)
    status: DeploymentStatus = msgspec.field(default_factory=DeploymentStatus)


class JobSpec(ApiStruct, frozen=True):
    parallelism: Int32 | None = None
    completions: Int32 | None = None
    active_deadline_seconds: Int64 | None = None
    pod_failure_policy: Obj | None = None
    success_policy: Obj | None = None
    backoff_limit: Int32 | None = None
    backoff_limit_per_index: Int32 | None = None
    max_failed_indexes: Int32 | None = None
    selector: LabelSelector | None = None
    manual_selector: bool | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    ttl_seconds_after_finished: Int32 | None = None
    completion_mode: str | None = None
    suspend: bool | None = None
    pod_replacement_policy: str | None = None
    managed_by: str | None = None
    scheduling: Obj | None = None


class Job(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = "batch/v1"
    KIND: ClassVar[str] = "Job"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: JobSpec = msgspec.field(default_factory=JobSpec)
    status: Obj = {}
