"""Jobs: run pods until ``completions`` succeeded, at most ``parallelism`` at a time.

After the batch/v1 Job controller, reduced to what draflow's simulated nodes need: NonIndexed
completion mode; pods named ``<job>-<5 random>`` with the job's labels
(``batch.kubernetes.io/job-name``, ``batch.kubernetes.io/controller-uid`` and the legacy
``job-name`` / ``controller-uid``) and the Job as controller; ``backoffLimit`` counted in failed
pods; ``suspend`` removes the active pods. A pod "runs" for a simulated time: once it has been
Running (``status.startTime``) for ``run_seconds`` (or the Job's ``RUN_SECONDS_ANNOTATION``), the
decider marks it Succeeded. When enough pods succeeded the Job gets ``SuccessCriteriaMet`` and
``Complete``; past the backoff limit ``FailureTarget`` and ``Failed`` (reason
``BackoffLimitExceeded``), as Kubernetes >= 1.31 reports them. Not modelled: Indexed mode, pod
failure / success policies, ``activeDeadlineSeconds``, the ``job-tracking`` finalizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from events.api.core_v1 import Pod
from events.api.meta import ObjectMeta
from events.api.workloads_v1 import Job
from services.runtime.naming import SuffixSource, hash_suffix, unique_generated_name
from services.workloads.actions import (
    CreatePod,
    DeletePod,
    MarkPodSucceeded,
    UpdateJobStatus,
    WorkloadAction,
    controlled_pods,
    is_active,
    owner_reference,
)
from services.workloads.deployment import scale_down_order

__all__ = ["DEFAULT_RUN_SECONDS", "RUN_SECONDS_ANNOTATION", "job_finished", "sync_job"]

DEFAULT_RUN_SECONDS = 5.0
RUN_SECONDS_ANNOTATION = "workloads.draflow.io/run-seconds"


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


def _run_seconds(job: Job, default: float) -> float:
    value = job.metadata.annotations.get(RUN_SECONDS_ANNOTATION)
    try:
        return float(value) if value is not None else default
    except ValueError:
        return default


def _new_pod(job: Job, name: str, prefix: str) -> Pod:
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
            annotations=dict(template.metadata.annotations),
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
    run_seconds: float = DEFAULT_RUN_SECONDS,
    suffixes: SuffixSource = hash_suffix,
) -> list[WorkloadAction]:
    """Actions for one Job at time ``now`` (``pods``: its namespace's pods)."""
    meta = job.metadata
    if meta.deletion_timestamp is not None:
        return []  # being deleted: no new pods; the garbage collector deletes or orphans them
    all_pods = list(pods)
    owned = controlled_pods(meta, all_pods)
    stamp = _stamp(now)
    actions: list[WorkloadAction] = []
    finished = job_finished(job)

    # Pods whose simulated run is over succeed now.
    run_for = timedelta(seconds=_run_seconds(job, run_seconds))
    done_now: set[str] = set()
    if finished is None:
        for pod in owned:
            start = pod.status.start_time
            if is_active(pod) and pod.status.phase == "Running" and start and _parse(start) + run_for <= now:
                m = pod.metadata
                actions.append(
                    MarkPodSucceeded(namespace=m.namespace, name=m.name, uid=m.uid, finished_at=stamp)
                )
                done_now.add(m.uid)

    succeeded = sum(1 for p in owned if p.status.phase == "Succeeded" or p.metadata.uid in done_now)
    failed = sum(1 for p in owned if p.status.phase == "Failed")
    active = [p for p in owned if is_active(p) and p.metadata.uid not in done_now]
    parallelism = 1 if job.spec.parallelism is None else job.spec.parallelism
    completions = job.spec.completions
    backoff_limit = 6 if job.spec.backoff_limit is None else job.spec.backoff_limit

    conditions = list(job.status.get("conditions") or [])
    completion_time = job.status.get("completionTime")
    if finished is None and failed > backoff_limit:
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
        if len(active) < want:
            prefix = f"{meta.name}-"
            taken = {p.metadata.name for p in all_pods}
            for n in range(want - len(active)):
                key = f"{meta.namespace}/{meta.uid}/{len(owned)}/{n}"
                name = unique_generated_name(prefix, key, taken, suffixes)
                taken.add(name)
                actions.append(CreatePod(pod=_new_pod(job, name, prefix)))
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
