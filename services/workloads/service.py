"""The workloads service: level-triggered passes of ``sync_deployment`` / ``sync_job`` over the cache.

Pods are created and deleted through the apiserver (admission, graceful deletion: a Running pod
is torn down by its kubelet before it goes); their containers run, finish and fail on the
kubelets' simulated container runtime. Deployment and Job status goes through the status API at
the version the decider saw (a conflict: decide again). Pods whose Deployment or Job is gone are
the garbage collector's (``draflow.services.garbage_collector``: they are owned by it). Jobs are re-synced
on a timer, since their pod-failure back-off ends as time passes.
"""

from __future__ import annotations

from datetime import UTC, datetime

from draflow.services.runtime.controller import Runtime
from draflow.services.workloads.actions import (
    CreatePod,
    DeletePod,
    UpdateDeploymentStatus,
    UpdateJobStatus,
    WorkloadAction,
)
from draflow.services.workloads.deployment import sync_deployment
from draflow.services.workloads.job import DEFAULT_POD_FAILURE_BACKOFF_S, DEFAULT_RUN_SECONDS, sync_job

__all__ = ["ACTOR", "WorkloadsService"]

ACTOR = "workloads"
KINDS = frozenset({"Pod", "Deployment", "Job"})


class WorkloadsService:
    def __init__(
        self,
        rt: Runtime,
        *,
        job_run_seconds: float = DEFAULT_RUN_SECONDS,
        pod_failure_backoff_s: float = DEFAULT_POD_FAILURE_BACKOFF_S,
    ) -> None:
        self.rt = rt
        self.job_run_seconds = job_run_seconds  # a Job's run-seconds annotation overrides it
        self.pod_failure_backoff_s = pod_failure_backoff_s
        rt.kinds = KINDS

    async def sync(self) -> None:
        rt = self.rt
        for deploy in rt.items("Deployment"):
            pods = rt.items("Pod", deploy.metadata.namespace)
            # the position read per decision: an earlier decision's creates moved it on
            await self.execute(sync_deployment(deploy, pods, at_seq=rt.cache.position))
        now = datetime.now(UTC)
        for job in rt.items("Job"):
            pods = rt.items("Pod", job.metadata.namespace)
            actions = sync_job(
                job,
                pods,
                now,
                at_seq=rt.cache.position,
                run_seconds=self.job_run_seconds,
                pod_failure_backoff_s=self.pod_failure_backoff_s,
            )
            await self.execute(actions)

    async def execute(self, actions: list[WorkloadAction]) -> None:
        rt = self.rt
        for a in actions:
            if isinstance(a, CreatePod):
                await rt.create(a.pod)
            elif isinstance(a, DeletePod):
                await rt.delete("Pod", a.namespace, a.name, uid=a.uid)
            elif isinstance(a, (UpdateDeploymentStatus, UpdateJobStatus)):
                kind = "Deployment" if isinstance(a, UpdateDeploymentStatus) else "Job"
                obj = rt.get(kind, a.namespace, a.name)
                if obj is not None and obj.metadata.uid == a.uid:
                    await rt.update_status(obj, a.status)
