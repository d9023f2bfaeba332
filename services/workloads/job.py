"""Jobs: run pods until ``completions`` succeeded, at most ``parallelism`` at a time.

After the batch/v1 Job controller, reduced to what draflow's simulated nodes need: NonIndexed
completion mode; pods named ``<job>-<5 random>`` with the job's labels
(``batch.kubernetes.io/job-name``, ``batch.kubernetes.io/controller-uid`` and the legacy
``job-name`` / ``controller-uid``) and the Job as controller; ``suspend`` removes the active pods.
The pods' containers run on the kubelets' simulated container runtime
(``draflow.services.runtime.programs``): their command decides how long they run and how they exit; a
container whose command the simulation does not understand runs ``run_seconds`` (or the Job's
``RUN_SECONDS_ANNOTATION``), written onto each pod as that same annotation, and exits 0.

Failed pods are replaced after the Job controller's pod-failure back-off (10 s doubling per
failure since the last success, at most 10 min, from the last failure's finish time); a Job with
more failed pods than ``backoffLimit`` — or, with ``restartPolicy: OnFailure``, as many container
restarts in its active pods — fails. When enough pods succeeded the Job gets
``SuccessCriteriaMet`` and ``Complete``; past the backoff limit ``FailureTarget`` and ``Failed``
(reason ``BackoffLimitExceeded``), as Kubernetes >= 1.31 reports them. Not modelled: Indexed mode,
pod failure / success policies, ``activeDeadlineSeconds``, the ``job-tracking`` finalizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from draflow.events.api.core_v1 import Pod
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.workloads_v1 import Job
from draflow.services.runtime.naming import SuffixSource, hash_suffix, unique_generated_name
from draflow.services.runtime.programs import RUN_SECONDS_ANNOTATION
from draflow.services.workloads.actions import (
    CreatePod,
    DeletePod,
    UpdateJobStatus,
    WorkloadAction,
    controlled_pods,
    is_active,
    owner_reference,
)
from draflow.services.workloads.deployment import scale_down_order

__all__ = [
    "DEFAULT_POD_FAILURE_BACKOFF_S",
    "DEFAULT_RUN_SECONDS",
    "MAX_POD_FAILURE_BACKOFF_S",
    "RUN_SECONDS_ANNOTATION",
    "job_finished",
    "pod_failure_backoff",
    "sync_job",
]

DEFAULT_RUN_SECONDS = 5.0
DEFAULT_POD_FAILURE_BACKOFF_S = 10.0  # job controller: DefaultJobPodFailureBackOff
MAX_POD_FAILURE_BACKOFF_S = 600.0  # job controller: MaxJobPodFailureBackOff


def _stamp(now: datetime) -> str:
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def job_finished(job: Job) -> str | None:
    """``Complete`` or ``Failed`` when the Job has that condition set to True."""
    for condition in job.status.get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return str(condition["type"])
    return None


def _run_seconds(job: Job, default: float) -> str:
    value = job.metadata.annotations.get(RUN_SECONDS_ANNOTATION)
    try:
        return f"{float(value) if value is not None else default:g}"
    except ValueError:
        return f"{default:g}"


def _finished_at(pod: Pod) -> str:
    """When a finished pod's last container stopped (its Ready condition's time otherwise)."""
    times = [
        str(s["state"]["terminated"].get("finishedAt") or "")
        for s in pod.status.container_statuses
        if "terminated" in (s.get("state") or {})
    ]
    times += [c.last_transition_time or "" for c in pod.status.conditions if c.type == "Ready"]
    return max((t for t in times if t), default="")


def pod_failure_backoff(
    pods: Iterable[Pod],
    now: datetime,
    base_s: float = DEFAULT_POD_FAILURE_BACKOFF_S,
    max_s: float = MAX_POD_FAILURE_BACKOFF_S,
) -> float:
    """Seconds until the Job may create pods again after failures (upstream ``backoffRecord``):
    ``base_s`` doubling per failed pod since the last success, at most ``max_s``, counted from
    the newest failure's finish time; 0 when nothing failed since the last success."""
    finished = sorted(
        (_finished_at(p), p.status.phase) for p in pods if p.status.phase in ("Succeeded", "Failed")
    )
    failures = 0
    last_failure = ""
    for at, phase in finished:
        if phase == "Succeeded":
            failures, last_failure = 0, ""
        else:
            failures, last_failure = failures + 1, at
    if failures == 0 or not last_failure:
        return 0.0
    wait = min(base_s * 2 ** (failures - 1), max_s)
    elapsed = (now - _parse(last_failure)).total_seconds()
    return max(wait - elapsed, 0.0)


def _restarts_past_limit(job: Job, pods: Iterable[Pod], limit: int) -> bool:
    """``pastBackoffLimitOnFailure``: with OnFailure, container restarts of the Running or
    Pending pods count against ``backoffLimit``."""
    if job.spec.template.spec.restart_policy != "OnFailure":
        return False
    restarts = sum(
        int(s.get("restartCount") or 0)
        for p in pods
        if p.status.phase in ("Running", "Pending", "")
        for s in (*p.status.init_container_statuses, *p.status.container_statuses)
    )
    return restarts > 0 if limit == 0 else restarts >= limit


def _new_pod(job: Job, name: str, prefix: str, run_seconds: str) -> Pod:
    meta = job.metadata
    template = job.spec.template
    labels = {
        **template.metadata.labels,
        "batch.kubernetes.io/controller-uid": meta.uid,
        "batch.kubernetes.io/job-name": meta.name,
        "controller-uid": meta.uid,
        "job-name": meta.name,
    }
    return Pod(
        metadata=ObjectMeta(
            name=name,
            generate_name=prefix,
            namespace=meta.namespace,
            labels=labels,
            annotations={RUN_SECONDS_ANNOTATION: run_seconds, **template.metadata.annotations},
            owner_references=(owner_reference("batch/v1", "Job", meta),),
        ),
        spec=template.spec,
    )


def _condition(kind: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "lastProbeTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def sync_job(
    job: Job,
    pods: Iterable[Pod],
    now: datetime,
    *,
    at_seq: int,
    run_seconds: float = DEFAULT_RUN_SECONDS,
    pod_failure_backoff_s: float = DEFAULT_POD_FAILURE_BACKOFF_S,
    suffixes: SuffixSource = hash_suffix,
) -> list[WorkloadAction]:
    """Actions for one Job at time ``now`` (``pods``: its namespace's pods). ``at_seq``: the
    stream sequence of the last event the decision consumed, which seeds new pods' name suffixes
    (see ``sync_deployment``)."""
    meta = job.metadata
    if meta.deletion_timestamp is not None:
        return []  # being deleted: no new pods; the garbage collector deletes or orphans them
    all_pods = list(pods)
    owned = controlled_pods(meta, all_pods)
    stamp = _stamp(now)
    actions: list[WorkloadAction] = []
    finished = job_finished(job)

    succeeded = sum(1 for p in owned if p.status.phase == "Succeeded")
    failed = sum(1 for p in owned if p.status.phase == "Failed")
    active = [p for p in owned if is_active(p)]
    parallelism = 1 if job.spec.parallelism is None else job.spec.parallelism
    completions = job.spec.completions
    backoff_limit = 6 if job.spec.backoff_limit is None else job.spec.backoff_limit

    conditions = list(job.status.get("conditions") or [])
    completion_time = job.status.get("completionTime")
    if finished is None and (failed > backoff_limit or _restarts_past_limit(job, active, backoff_limit)):
        finished = "Failed"
        message = "Job has reached the specified backoff limit"
        conditions += [
            _condition("FailureTarget", "BackoffLimitExceeded", message, stamp),
            _condition("Failed", "BackoffLimitExceeded", message, stamp),
        ]
    elif finished is None and (
        (completions is not None and succeeded >= completions)
        or (completions is None and succeeded > 0 and not active)
    ):
        finished = "Complete"
        message = "Reached expected number of succeeded pods"
        conditions += [
            _condition("SuccessCriteriaMet", "CompletionsReached", message, stamp),
            _condition("Complete", "CompletionsReached", message, stamp),
        ]
        completion_time = stamp

    deleted: set[str] = set()

    def delete(pod: Pod, reason: str) -> None:
        m = pod.metadata
        actions.append(DeletePod(namespace=m.namespace, name=m.name, uid=m.uid, reason=reason))
        deleted.add(m.uid)

    created = 0
    if finished is not None or job.spec.suspend:
        reason = "job suspended" if finished is None else f"job {finished.lower()}"
        for pod in active:
            delete(pod, reason)
    else:
        if completions is None:
            want = 0 if succeeded > 0 else parallelism
        else:
            want = max(0, min(parallelism, completions - succeeded))
        if len(active) < want and pod_failure_backoff(owned, now, pod_failure_backoff_s) == 0:
            prefix = f"{meta.name}-"
            run_for = _run_seconds(job, run_seconds)
            taken = {p.metadata.name for p in all_pods}
            for n in range(want - len(active)):
                key = f"{meta.namespace}/{meta.uid}/{at_seq}/{n}"
                name = unique_generated_name(prefix, key, taken, suffixes)
                taken.add(name)
                actions.append(CreatePod(pod=_new_pod(job, name, prefix, run_for)))
                created += 1
        # A work-queue job (no completions) lets running pods finish once one succeeded.
        if completions is not None or succeeded == 0:
            for pod in scale_down_order(active)[: max(0, len(active) - want)]:
                delete(pod, "parallelism reduced")
    remaining = [p for p in active if p.metadata.uid not in deleted]

    status: dict[str, Any] = {}
    start_time = job.status.get("startTime") or (None if job.spec.suspend else stamp)
    if start_time:
        status["startTime"] = start_time
    counts = {
        "active": len(remaining) + created,
        "ready": sum(1 for p in remaining if p.status.phase == "Running"),
        "succeeded": succeeded,
        "failed": failed,
    }
    status.update({k: v for k, v in counts.items() if v})
    if completion_time:
        status["completionTime"] = completion_time
    if conditions:
        status["conditions"] = conditions
    if status != job.status:
        actions.append(UpdateJobStatus(namespace=meta.namespace, name=meta.name, uid=meta.uid, status=status))
    return actions
