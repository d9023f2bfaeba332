"""The workloads service: level-triggered passes of ``sync_deployment`` / ``sync_job`` over the cache.

Pods are created and deleted through the apiserver (admission, graceful deletion: a Running pod
is torn down by its kubelet before it goes). ``MarkPodSucceeded`` becomes ``PodSucceeded`` with the
containers' terminated statuses (``PodContainerStatusesReported``) on the pod's subject; Deployment
and Job status goes through the status API at the version the decider saw (a conflict: decide
again). Pods whose Deployment or Job is gone are the garbage collector's
(``services.garbage_collector``: they are owned by it). Jobs are re-synced on a timer, since their
pods succeed as time passes.
"""

from __future__ import annotations

from datetime import UTC, datetime

from events.dra import PodSucceeded
from events.node import PodContainerStatusesReported
from services.runtime.controller import Runtime
from services.workloads.actions import (
    CreatePod,
    DeletePod,
    MarkPodSucceeded,
    UpdateDeploymentStatus,
    UpdateJobStatus,
    WorkloadAction,
    succeeded_status,
)
from services.workloads.deployment import sync_deployment
from services.workloads.job import DEFAULT_RUN_SECONDS, sync_job

__all__ = ["ACTOR", "WorkloadsService"]

ACTOR = "workloads"
KINDS = frozenset({"Pod", "Deployment", "Job"})


class WorkloadsService:
    def __init__(self, rt: Runtime, *, job_run_seconds: float = DEFAULT_RUN_SECONDS) -> None:
        self.rt = rt
        self.job_run_seconds = job_run_seconds  # a Job's run-seconds annotation overrides it
        rt.kinds = KINDS

    async def sync(self) -> None:
        rt = self.rt
        for deploy in rt.items("Deployment"):
            pods = rt.items("Pod", deploy.metadata.namespace)
            await self.execute(sync_deployment(deploy, pods))
        now = datetime.now(UTC)
        for job in rt.items("Job"):
            pods = rt.items("Pod", job.metadata.namespace)
            await self.execute(sync_job(job, pods, now, run_seconds=self.job_run_seconds))

    async def execute(self, actions: list[WorkloadAction]) -> None:
        rt = self.rt
        for a in actions:
            if isinstance(a, CreatePod):
                await rt.create(a.pod)
            elif isinstance(a, DeletePod):
                await rt.delete("Pod", a.namespace, a.name, uid=a.uid)
            elif isinstance(a, MarkPodSucceeded):
                pod = rt.get("Pod", a.namespace, a.name)
                if pod is not None and pod.metadata.uid == a.uid:
                    done = succeeded_status(pod, a.finished_at)
                    reported = PodContainerStatusesReported(
                        container_statuses=tuple(done.container_statuses),
                        init_container_statuses=tuple(pod.status.init_container_statuses),
                    )
                    await rt.append("Pod", a.namespace, a.name, [reported, PodSucceeded(at=a.finished_at)])
            elif isinstance(a, (UpdateDeploymentStatus, UpdateJobStatus)):
                kind = "Deployment" if isinstance(a, UpdateDeploymentStatus) else "Job"
                obj = rt.get(kind, a.namespace, a.name)
                if obj is not None and obj.metadata.uid == a.uid:
                    await rt.update_status(obj, a.status)
