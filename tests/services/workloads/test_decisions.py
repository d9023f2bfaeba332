"""Workloads: Deployment replicas / template changes, Job parallelism / completions / failures.

The real-world Deployment and Job manifests run through the deciders together with the claim
controller, on a small in-memory cluster that applies the actions like the reducers will.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

import msgspec
import pytest

from draflow.events.api.core_v1 import Pod, PodTemplateSpec
from draflow.events.api.loader import load_manifests
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.resource_v1 import ResourceClaimTemplate
from draflow.events.api.workloads_v1 import Deployment, DeploymentSpec, Job, JobSpec
from draflow.services.apiserver.admission import admit as api_admit
from draflow.services.claim_controller import CreateClaim, sync_pod
from draflow.services.kubelet.containers import advance
from draflow.services.kubelet.node import running_status
from draflow.services.runtime.naming import ALPHANUMS
from draflow.services.workloads import (
    POD_TEMPLATE_HASH_LABEL,
    RUN_SECONDS_ANNOTATION,
    CreatePod,
    DeletePod,
    UpdateDeploymentStatus,
    UpdateJobStatus,
    job_finished,
    pod_failure_backoff,
    pod_template_hash,
    sync_deployment,
    sync_job,
)
from tests.builders import make_container
from tests.paths import TESTS

REALWORLD = TESTS / "data" / "realworld"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


W = TypeVar("W", Deployment, Job)


class Cluster(Generic[W]):
    """Pods plus one workload object; ``apply`` mirrors what the shell's reducers will do."""

    def __init__(self, obj: W) -> None:
        self.obj: W = obj
        self.pods: dict[str, Pod] = {}
        self.created = 0
        self.now = T0
        self.seq = 1  # the log's position: every applied action is one more event

    def apply(self, actions) -> None:
        for action in actions:
            self.seq += 1
            if isinstance(action, CreatePod):
                self.created += 1
                meta = msgspec.structs.replace(
                    action.pod.metadata,
                    uid=f"uid-{action.pod.metadata.name}",
                    creation_timestamp=f"2026-03-01T12:{self.created // 60:02d}:{self.created % 60:02d}Z",
                )
                self.pods[meta.name] = msgspec.structs.replace(action.pod, metadata=meta)
            elif isinstance(action, DeletePod):
                self.pods.pop(action.name, None)
            elif isinstance(action, (UpdateJobStatus, UpdateDeploymentStatus)):
                self.obj = msgspec.structs.replace(self.obj, status=action.status)

    def run_pods(self) -> None:
        """The scheduler and kubelets: every pending pod starts now, its containers running."""
        for name, pod in self.pods.items():
            if pod.status.phase in ("", "Pending"):
                spec = msgspec.structs.replace(pod.spec, node_name="node-1")
                self.pods[name] = msgspec.structs.replace(
                    pod, spec=spec, status=running_status(pod, self.now)
                )

    def run_containers(self) -> None:
        """The kubelets' simulated container runtime, up to ``now``: containers exit, restart,
        pods finish."""
        for name, pod in self.pods.items():
            if pod.status.phase == "Running":
                result = advance(pod, self.now)
                status = msgspec.structs.replace(
                    pod.status, container_statuses=result.container_statuses, phase=result.phase
                )
                self.pods[name] = msgspec.structs.replace(pod, status=status)

    def sync(self, **kwargs):
        if isinstance(self.obj, Deployment):
            actions = sync_deployment(self.obj, self.pods.values(), at_seq=self.seq, **kwargs)
        else:
            actions = sync_job(self.obj, self.pods.values(), self.now, at_seq=self.seq, **kwargs)
        self.apply(actions)
        return actions


def deployment(replicas: int | None = 3, name: str = "web", image: str = "nginx") -> Deployment:
    template = msgspec.convert(
        {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": image}]}},
        type=PodTemplateSpec,
    )
    return Deployment(
        metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}", generation=1),
        spec=DeploymentSpec(replicas=replicas, template=template),
    )


def job(
    completions: int | None = 3,
    parallelism: int | None = 2,
    *,
    command: tuple[str, ...] = (),
    restart_policy: str = "Never",
    **spec,
) -> Job:
    base = deployment(name="batch").spec.template
    (container,) = base.spec.containers
    pod_spec = msgspec.structs.replace(
        base.spec,
        restart_policy=restart_policy,
        containers=(msgspec.structs.replace(container, command=command),),
    )
    base = msgspec.structs.replace(base, spec=pod_spec)
    return Job(
        metadata=ObjectMeta(name="batch", namespace="default", uid="uid-batch"),
        spec=JobSpec(completions=completions, parallelism=parallelism, template=base, **spec),
    )


# -- template hash -------------------------------------------------------------------------------


def test_pod_template_hash_is_deterministic_and_template_sensitive() -> None:
    template = deployment().spec.template
    value = pod_template_hash(template)
    assert value == pod_template_hash(template) and set(value) <= set(ALPHANUMS)
    assert pod_template_hash(deployment(image="other").spec.template) != value
    assert pod_template_hash(template, 1) != value


# -- Deployment ----------------------------------------------------------------------------------


def test_deployment_creates_replicas_named_like_kubernetes() -> None:
    deploy = deployment(3)
    actions = sync_deployment(deploy, [], at_seq=1)
    creates = [a for a in actions if isinstance(a, CreatePod)]
    assert len(creates) == 3
    template_hash = pod_template_hash(deploy.spec.template)
    for create in creates:
        meta = create.pod.metadata
        assert meta.generate_name == f"web-{template_hash}-"
        assert meta.name.startswith(meta.generate_name) and len(meta.name) == len(meta.generate_name) + 5
        assert meta.labels == {"app": "web", POD_TEMPLATE_HASH_LABEL: template_hash}
        (ref,) = meta.owner_references
        assert (ref.api_version, ref.kind, ref.name, ref.uid, ref.controller) == (
            "apps/v1",
            "Deployment",
            "web",
            "uid-web",
            True,
        )
        assert create.pod.spec == deploy.spec.template.spec
    assert len({c.pod.metadata.name for c in creates}) == 3


def test_long_deployment_names_are_cut_by_the_generate_name_rule() -> None:
    actions = sync_deployment(deployment(1, name="d" * 60), [], at_seq=1)
    (create,) = [a for a in actions if isinstance(a, CreatePod)]
    assert len(create.pod.metadata.name) == 63 and create.pod.metadata.name.startswith("d" * 58)


def test_deployment_converges_scales_and_reports_status() -> None:
    cluster = Cluster(deployment(3))
    cluster.sync()
    cluster.run_pods()
    cluster.sync()
    assert cluster.sync() == []
    status = cluster.obj.status
    assert (status.replicas, status.ready_replicas, status.available_replicas, status.updated_replicas) == (
        3,
        3,
        3,
        3,
    )

    cluster.obj = msgspec.structs.replace(
        cluster.obj, spec=msgspec.structs.replace(cluster.obj.spec, replicas=5)
    )
    assert len([a for a in cluster.sync() if isinstance(a, CreatePod)]) == 2
    running = {n for n, p in cluster.pods.items() if p.status.phase == "Running"}
    cluster.obj = msgspec.structs.replace(
        cluster.obj, spec=msgspec.structs.replace(cluster.obj.spec, replicas=2)
    )
    deletes = [a for a in cluster.sync() if isinstance(a, DeletePod)]
    # The two pending pods go first, then the newest running one.
    assert len(deletes) == 3 and {d.name for d in deletes[:2]}.isdisjoint(running)
    assert len(cluster.pods) == 2
    cluster.sync()
    assert cluster.sync() == []


def _scaled(cluster: Cluster[Deployment], replicas: int) -> None:
    spec = msgspec.structs.replace(cluster.obj.spec, replicas=replicas)
    cluster.obj = msgspec.structs.replace(cluster.obj, spec=spec)
    cluster.sync()
    cluster.run_pods()
    cluster.sync()


def test_generated_pod_names_are_unique_over_time() -> None:
    """Issue 23 item 7: a Deployment scaled 0 <-> 30 again and again gets new names every time
    (upstream's suffixes are random), not the same 30 names back; the names still follow from the
    log (same position, same decision, same names)."""
    cluster = Cluster(deployment(0))
    seen: list[str] = []
    for _ in range(10):
        _scaled(cluster, 30)
        assert len(cluster.pods) == 30
        seen += cluster.pods
        _scaled(cluster, 0)
        assert not cluster.pods
    assert len(seen) == 300 and len(set(seen)) == 300
    # replaying a decision (same state, same position) gives the same names
    again = sync_deployment(deployment(3), [], at_seq=7)
    assert again == sync_deployment(deployment(3), [], at_seq=7)
    assert again != sync_deployment(deployment(3), [], at_seq=8)


def test_job_pod_names_are_unique_over_time() -> None:
    """A Job whose failed pods are deleted (as a user or a TTL would) never reuses a name."""
    cluster = Cluster(job(completions=None, parallelism=2, backoff_limit=100))
    seen: list[str] = []
    for _ in range(10):
        cluster.sync()
        seen += [n for n in cluster.pods if n not in seen]
        cluster.pods.clear()
    assert len(seen) == 20 and len(set(seen)) == 20


def test_template_change_recreates_pods() -> None:
    cluster = Cluster(deployment(2))
    cluster.sync()
    cluster.run_pods()
    old_names = set(cluster.pods)
    new_template = deployment(2, image="v2").spec.template
    cluster.obj = msgspec.structs.replace(
        cluster.obj, spec=msgspec.structs.replace(cluster.obj.spec, template=new_template)
    )
    first = cluster.sync()
    assert {a.name for a in first if isinstance(a, DeletePod)} == old_names
    assert not any(isinstance(a, CreatePod) for a in first)  # old pods must be gone first (Recreate)
    second = cluster.sync()
    assert len([a for a in second if isinstance(a, CreatePod)]) == 2
    assert all(
        p.metadata.labels[POD_TEMPLATE_HASH_LABEL] == pod_template_hash(new_template)
        for p in cluster.pods.values()
    )


def test_pods_being_deleted_block_the_new_template_and_are_not_deleted_twice() -> None:
    cluster = Cluster(deployment(1))
    cluster.sync()
    (name,) = cluster.pods
    pod = cluster.pods[name]
    cluster.pods[name] = msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(pod.metadata, deletion_timestamp="2026-03-01T12:00:00Z")
    )
    cluster.obj = msgspec.structs.replace(
        cluster.obj,
        spec=msgspec.structs.replace(cluster.obj.spec, template=deployment(image="v2").spec.template),
    )
    assert not any(isinstance(a, (CreatePod, DeletePod)) for a in cluster.sync())


def test_paused_and_deleted_deployments() -> None:
    cluster = Cluster(
        msgspec.structs.replace(deployment(2), spec=msgspec.structs.replace(deployment(2).spec, paused=True))
    )
    assert not any(isinstance(a, CreatePod) for a in cluster.sync())
    cluster = Cluster(deployment(2))
    cluster.sync()
    deleting = msgspec.structs.replace(
        cluster.obj,
        metadata=msgspec.structs.replace(cluster.obj.metadata, deletion_timestamp="2026-03-01T12:00:00Z"),
    )
    # being deleted: its pods are the garbage collector's (deleted, or orphaned with Orphan)
    assert sync_deployment(deleting, cluster.pods.values(), at_seq=cluster.seq) == []


def test_other_workloads_pods_are_ignored() -> None:
    other = sync_deployment(deployment(1, name="other"), [], at_seq=1)[0]
    assert isinstance(other, CreatePod)
    created = sync_deployment(deployment(1), [other.pod], at_seq=2)
    assert len([a for a in created if isinstance(a, CreatePod)]) == 1


def test_realworld_deployment_pods_get_claims_from_the_template() -> None:
    results = load_manifests(
        REALWORLD / "NVIDIA__k8s-dra-driver-gpu" / "demo__specs__quickstart__v1__gpu-test4.yaml"
    )
    objs = [api_admit(r.obj) for r in results if r.obj is not None]
    deploy = next(o for o in objs if isinstance(o, Deployment))
    deploy = msgspec.structs.replace(deploy, metadata=msgspec.structs.replace(deploy.metadata, uid="uid-d"))
    templates = [o for o in objs if isinstance(o, ResourceClaimTemplate)]
    cluster = Cluster(deploy)
    cluster.sync()
    assert len(cluster.pods) == 4
    claims = []
    for pod in cluster.pods.values():
        pod = api_admit(pod, namespace="gpu-test4")
        actions = sync_pod(
            msgspec.structs.replace(
                pod, metadata=msgspec.structs.replace(pod.metadata, uid="u-" + pod.metadata.name)
            ),
            [],
            templates,
        )
        claims += [a for a in actions if isinstance(a, CreateClaim)]
    assert len({c.name for c in claims}) == 4
    for claim in claims:
        assert claim.generate_name == f"{claim.owner_reference.name}-mig-devices-"
        assert len(claim.claim.spec.devices.requests) == 4
        api_admit(claim.to_claim(), namespace="gpu-test4")


# -- Job -----------------------------------------------------------------------------------------


def run_job(cluster: Cluster, run_seconds: float = 5, rounds: int = 80, **kwargs) -> None:
    """Controller and kubelets take turns, ``run_seconds`` apart, until the Job finished."""
    for _ in range(rounds):
        cluster.sync(run_seconds=run_seconds, **kwargs)
        if job_finished(cluster.obj):
            cluster.sync(run_seconds=run_seconds, **kwargs)
            return
        cluster.run_pods()
        cluster.now += timedelta(seconds=run_seconds)
        cluster.run_containers()
    raise AssertionError("job did not finish")


def test_job_runs_parallelism_pods_until_completions_succeeded() -> None:
    cluster = Cluster(job(completions=5, parallelism=2))
    first = cluster.sync()
    assert len([a for a in first if isinstance(a, CreatePod)]) == 2
    pod = next(iter(cluster.pods.values()))
    assert pod.metadata.name.startswith("batch-") and len(pod.metadata.name) == len("batch-") + 5
    assert pod.metadata.labels["batch.kubernetes.io/job-name"] == "batch"
    assert pod.metadata.labels["controller-uid"] == "uid-batch"
    assert pod.metadata.owner_references[0].kind == "Job"
    # the simulated run time travels with the pod, for the kubelet's container runtime
    assert pod.metadata.annotations == {RUN_SECONDS_ANNOTATION: "5"}
    assert cluster.obj.status == {"startTime": "2026-03-01T12:00:00Z", "active": 2}

    run_job(cluster)
    status = cluster.obj.status
    assert status["succeeded"] == 5 and "active" not in status
    assert [c["type"] for c in status["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    assert status["conditions"][1]["reason"] == "CompletionsReached"
    assert status["completionTime"] >= status["startTime"]
    assert cluster.created == 5 and job_finished(cluster.obj) == "Complete"
    assert cluster.sync() == []


def test_pods_succeed_only_after_the_simulated_run_time() -> None:
    cluster = Cluster(job(completions=1, parallelism=1))
    cluster.sync(run_seconds=30)
    cluster.run_pods()
    cluster.now += timedelta(seconds=29)
    cluster.run_containers()
    assert [p.status.phase for p in cluster.pods.values()] == ["Running"]
    cluster.now += timedelta(seconds=1)
    cluster.run_containers()
    (pod,) = cluster.pods.values()
    (c,) = pod.status.container_statuses
    assert pod.status.phase == "Succeeded" and c["state"]["terminated"]["reason"] == "Completed"
    cluster.sync(run_seconds=30)
    assert job_finished(cluster.obj) == "Complete"


def test_run_time_annotation_overrides_the_default() -> None:
    j = job(completions=1, parallelism=1)
    j = msgspec.structs.replace(
        j, metadata=msgspec.structs.replace(j.metadata, annotations={RUN_SECONDS_ANNOTATION: "1"})
    )
    cluster = Cluster(j)
    cluster.sync(run_seconds=100)
    (pod,) = cluster.pods.values()
    assert pod.metadata.annotations[RUN_SECONDS_ANNOTATION] == "1"
    cluster.run_pods()
    cluster.now += timedelta(seconds=1)
    cluster.run_containers()
    assert [p.status.phase for p in cluster.pods.values()] == ["Succeeded"]


def test_the_command_decides_how_a_job_pod_ends() -> None:
    """An understood command overrides the simulated run time: ``sleep 2; exit 3`` fails after 2 s."""
    cluster = Cluster(job(completions=1, parallelism=1, command=("sh", "-c", "sleep 2; exit 3")))
    cluster.sync(run_seconds=100)
    cluster.run_pods()
    cluster.now += timedelta(seconds=2)
    cluster.run_containers()
    (pod,) = cluster.pods.values()
    (c,) = pod.status.container_statuses
    assert pod.status.phase == "Failed"
    assert (c["state"]["terminated"]["exitCode"], c["state"]["terminated"]["reason"]) == (3, "Error")


def test_job_fails_after_the_backoff_limit() -> None:
    """Upstream: Jobs with failing pods retry up to ``backoffLimit``: with 2, three pods fail."""
    cluster = Cluster(job(completions=3, parallelism=1, backoff_limit=2, command=("false",)))
    run_job(cluster, pod_failure_backoff_s=0)
    status = cluster.obj.status
    assert status["failed"] == 3 and cluster.created == 3
    assert [c["type"] for c in status["conditions"]] == ["FailureTarget", "Failed"]
    assert status["conditions"][1]["reason"] == "BackoffLimitExceeded"
    assert status["conditions"][1]["message"] == "Job has reached the specified backoff limit"
    assert job_finished(cluster.obj) == "Failed"
    assert cluster.sync() == []


def test_failed_pods_are_replaced_after_the_pod_failure_backoff() -> None:
    """The Job controller's back-off: 10 s after the first failure, 20 s after the second, counted
    from the failure's finish time."""
    cluster = Cluster(job(completions=1, parallelism=1, backoff_limit=5, command=("false",)))
    cluster.sync()
    cluster.run_pods()
    cluster.run_containers()  # fails at once
    assert [p.status.phase for p in cluster.pods.values()] == ["Failed"]
    assert not any(isinstance(a, CreatePod) for a in cluster.sync())
    cluster.now += timedelta(seconds=9)
    assert not any(isinstance(a, CreatePod) for a in cluster.sync())
    cluster.now += timedelta(seconds=1)
    assert len([a for a in cluster.sync() if isinstance(a, CreatePod)]) == 1
    cluster.run_pods()
    cluster.run_containers()
    assert pod_failure_backoff(cluster.pods.values(), cluster.now) == 20.0
    cluster.now += timedelta(seconds=19)
    assert not any(isinstance(a, CreatePod) for a in cluster.sync())
    cluster.now += timedelta(seconds=1)
    assert any(isinstance(a, CreatePod) for a in cluster.sync())
    assert cluster.obj.status["failed"] == 2


def test_pod_failure_backoff_counts_failures_since_the_last_success() -> None:
    def finished(phase: str, at: str) -> Pod:
        status = {
            "phase": phase,
            "containerStatuses": [{"name": "c", "state": {"terminated": {"finishedAt": at}}}],
        }
        return msgspec.convert({"metadata": {"name": at}, "status": status}, type=Pod)

    now = datetime(2026, 3, 1, 12, 1, 0, tzinfo=UTC)
    assert pod_failure_backoff([], now) == 0
    one = [finished("Failed", "2026-03-01T12:00:55Z")]
    assert pod_failure_backoff(one, now) == 5.0  # 10 s from 12:00:55
    three = [*one, finished("Failed", "2026-03-01T12:00:56Z"), finished("Failed", "2026-03-01T12:00:58Z")]
    assert pod_failure_backoff(three, now) == 38.0  # 40 s from 12:00:58
    assert pod_failure_backoff([*three, finished("Succeeded", "2026-03-01T12:00:59Z")], now) == 0
    many = [finished("Failed", f"2026-03-01T12:00:{i:02d}Z") for i in range(20)]
    assert pod_failure_backoff(many, now) == 600.0 - 41  # capped at 10 min


def test_on_failure_job_fails_when_restarts_reach_the_backoff_limit() -> None:
    """``pastBackoffLimitOnFailure``: with OnFailure the containers restart in place; their
    restarts count against ``backoffLimit`` and the Job fails, its pods deleted."""
    cluster = Cluster(
        job(completions=1, parallelism=1, backoff_limit=2, command=("false",), restart_policy="OnFailure")
    )
    cluster.sync()
    cluster.run_pods()
    cluster.run_containers()  # exit 1, restarted at once (restart 1), exit 1: back-off 10 s
    (pod,) = cluster.pods.values()
    (c,) = pod.status.container_statuses
    assert pod.status.phase == "Running" and c["restartCount"] == 1
    assert c["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert job_finished(cluster.obj) is None and not any(isinstance(a, DeletePod) for a in cluster.sync())
    cluster.now += timedelta(seconds=10)
    cluster.run_containers()  # restart 2
    actions = cluster.sync()
    assert job_finished(cluster.obj) == "Failed"
    assert [a.reason for a in actions if isinstance(a, DeletePod)] == ["job failed"]


def test_suspended_job_removes_its_active_pods() -> None:
    cluster = Cluster(job())
    cluster.sync()
    cluster.obj = msgspec.structs.replace(
        cluster.obj, spec=msgspec.structs.replace(cluster.obj.spec, suspend=True)
    )
    deletes = [a for a in cluster.sync() if isinstance(a, DeletePod)]
    assert len(deletes) == 2 and deletes[0].reason == "job suspended" and cluster.pods == {}


def test_work_queue_job_completes_when_one_succeeded_and_the_rest_finished() -> None:
    j = job(completions=None, parallelism=2)
    cluster = Cluster(j)
    cluster.sync(run_seconds=100)
    cluster.run_pods()
    names = sorted(cluster.pods)
    first = cluster.pods[names[0]]
    quick = {**first.metadata.annotations, RUN_SECONDS_ANNOTATION: "1"}
    cluster.pods[names[0]] = msgspec.structs.replace(
        first, metadata=msgspec.structs.replace(first.metadata, annotations=quick)
    )
    cluster.now += timedelta(seconds=1)
    cluster.run_containers()
    assert cluster.pods[names[0]].status.phase == "Succeeded"
    actions = cluster.sync(run_seconds=100)
    assert not any(isinstance(a, (CreatePod, DeletePod)) for a in actions)  # the other one may finish
    assert job_finished(cluster.obj) is None
    cluster.now += timedelta(seconds=100)
    cluster.run_containers()
    cluster.sync(run_seconds=100)
    assert job_finished(cluster.obj) == "Complete"


@pytest.mark.parametrize("parallelism", [0, 3])
def test_parallelism_bounds_active_pods(parallelism: int) -> None:
    cluster = Cluster(job(completions=2, parallelism=parallelism))
    cluster.sync()
    assert len(cluster.pods) == min(parallelism, 2)


def test_realworld_website_job_runs_to_completion() -> None:
    (result,) = load_manifests(
        REALWORLD / "kubernetes__website" / "content__en__examples__dra__dra-example-job.yaml"
    )
    assert result.obj is not None
    admitted = api_admit(result.obj)
    assert isinstance(admitted, Job)
    the_job = msgspec.structs.replace(
        admitted, metadata=msgspec.structs.replace(admitted.metadata, uid="uid-j")
    )
    cluster = Cluster(the_job)
    cluster.sync()
    assert len(cluster.pods) == 2  # parallelism
    pod = next(iter(cluster.pods.values()))
    assert [c.name for c in pod.spec.resource_claims] == ["separate-gpu-claim", "shared-gpu-claim"]
    # its containers run `sleep 9999`: each pod takes 9999 s of simulated time
    run_job(cluster, run_seconds=9999)
    assert cluster.obj.status["succeeded"] == 10 and cluster.created == 10


def test_make_container_builder_is_usable_for_pod_templates() -> None:
    assert make_container("x", claims=[("c", "r")]).resources.claims[0].request == "r"


def test_job_run_seconds_comes_from_the_flag_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from draflow.services.workloads.__main__ import parse_args

    monkeypatch.delenv("DRAFLOW_JOB_RUN_SECONDS", raising=False)
    assert parse_args([]).job_run_seconds == 5.0
    assert parse_args(["--job-run-seconds", "0.5"]).job_run_seconds == 0.5
    monkeypatch.setenv("DRAFLOW_JOB_RUN_SECONDS", "2")
    assert parse_args([]).job_run_seconds == 2.0
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--job-run-seconds", "-1"])
    assert exit_.value.code == 2
