"""The workloads controller: pods for Deployments and Jobs, so real Deployment/Job manifests run.

Pure deciders (``sync_deployment``, ``sync_job``) returning actions as data; the service shell
(``service``, ``python -m draflow.services.workloads``) runs them over the log-fed cache and appends the
results.
"""

from draflow.services.workloads.actions import (
    CreatePod,
    DeletePod,
    UpdateDeploymentStatus,
    UpdateJobStatus,
    WorkloadAction,
    controlled_pods,
)
from draflow.services.workloads.deployment import POD_TEMPLATE_HASH_LABEL, pod_template_hash, sync_deployment
from draflow.services.workloads.job import (
    DEFAULT_POD_FAILURE_BACKOFF_S,
    DEFAULT_RUN_SECONDS,
    RUN_SECONDS_ANNOTATION,
    job_finished,
    pod_failure_backoff,
    sync_job,
)

__all__ = [
    "DEFAULT_POD_FAILURE_BACKOFF_S",
    "DEFAULT_RUN_SECONDS",
    "POD_TEMPLATE_HASH_LABEL",
    "RUN_SECONDS_ANNOTATION",
    "CreatePod",
    "DeletePod",
    "UpdateDeploymentStatus",
    "UpdateJobStatus",
    "WorkloadAction",
    "controlled_pods",
    "job_finished",
    "pod_failure_backoff",
    "pod_template_hash",
    "sync_deployment",
    "sync_job",
]
