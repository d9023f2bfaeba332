"""Workloads: Deployment replicas / template changes, Job parallelism / completions / failures.

The real-world Deployment and Job manifests run through the deciders together with the claim
controller, on a small in-memory cluster that applies the actions like the reducers will.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Generic, TypeVar

import msgspec
import pytest

from events.api.core_v1 import Pod, PodTemplateSpec
from events.api.loader import load_manifests
from events.api.meta import ObjectMeta
from events.api.resource_v1 import ResourceClaimTemplate
from events.api.workloads_v1 import Deployment, DeploymentSpec, Job, JobSpec
from services.apiserver.admission import admit as api_admit
from services.claim_controller import CreateClaim, sync_pod
from services.runtime.naming import ALPHANUMS
from services.workloads import (
    POD_TEMPLATE_HASH_LABEL,
    RUN_SECONDS_ANNOTATION,
    CreatePod,
    DeletePod,
    MarkPodSucceeded,
    UpdateDeploymentStatus,
    UpdateJobStatus,
    job_finished,
    pod_template_hash,
    succeeded_status,
    sync_deployment,
    sync_job,
)
from tests.builders import make_container

REALWORLD = Path(__file__).resolve().parents[1] / "data" / "realworld"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


W = TypeVar("W", Deployment, Job)


class Cluster(Generic[W]):
    """Pods plus one workload object; ``apply`` mirrors what the shell's reducers will do."""

    def __init__(self, obj: W) -> None:
        self.obj: W = obj
        self.pods: dict[str, Pod] = {}
        self.created = 0
        self.now = T0

    def apply(self, actions) -> None:
        for action in actions:
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
            elif isinstance(action, MarkPodSucceeded):
                pod = self.pods[action.name]
                self.pods[action.name] = msgspec.structs.replace(
                    pod, status=succeeded_status(pod, action.finished_at)
                )
            elif isinstance(action, (UpdateJobStatus, UpdateDeploymentStatus)):
                self.obj = msgspec.structs.replace(self.obj, status=action.status)

    def run_pods(self, phase: str = "Running") -> None:
        """The scheduler and kubelets: every pending pod starts now (or fails)."""
        stamp = self.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        for name, pod in self.pods.items():
            if pod.status.phase in ("", "Pending"):
                status = msgspec.structs.replace(pod.status, phase=phase, start_time=stamp)
                spec = msgspec.structs.replace(pod.spec, node_name="node-1")
                self.pods[name] = msgspec.structs.replace(pod, spec=spec, status=status)

    def sync(self, **kwargs):
        if isinstance(self.obj, Deployment):
            actions = sync_deployment(self.obj, self.pods.values(), **kwargs)
        else:
            actions = sync_job(self.obj, self.pods.values(), self.now, **kwargs)
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


def job(completions: int | None = 3, parallelism: int | None = 2, **spec) -> Job:
    base = deployment(name="batch").spec.template
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
    actions = sync_deployment(deploy, [])
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
    actions = sync_deployment(deployment(1, name="d" * 60), [])
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
    assert sync_deployment(deleting, cluster.pods.values()) == []


def test_other_workloads_pods_are_ignored() -> None:
    other = sync_deployment(deployment(1, name="other"), [])[0]
    assert isinstance(other, CreatePod)
    assert len([a for a in sync_deployment(deployment(1), [other.pod]) if isinstance(a, CreatePod)]) == 1


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


def run_job(cluster: Cluster, run_seconds: float = 5, fail: bool = False, rounds: int = 40) -> None:
    for _ in range(rounds):
        cluster.sync(run_seconds=run_seconds)
        if job_finished(cluster.obj):
            cluster.sync(run_seconds=run_seconds)
            return
        cluster.run_pods("Failed" if fail else "Running")
        cluster.now += timedelta(seconds=run_seconds)
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
    assert not any(isinstance(a, MarkPodSucceeded) for a in cluster.sync(run_seconds=30))
    cluster.now += timedelta(seconds=1)
    assert any(isinstance(a, MarkPodSucceeded) for a in cluster.sync(run_seconds=30))


def test_run_time_annotation_overrides_the_default() -> None:
    j = job(completions=1, parallelism=1)
    j = msgspec.structs.replace(
        j, metadata=msgspec.structs.replace(j.metadata, annotations={RUN_SECONDS_ANNOTATION: "1"})
    )
    cluster = Cluster(j)
    cluster.sync(run_seconds=100)
    cluster.run_pods()
    cluster.now += timedelta(seconds=1)
    assert any(isinstance(a, MarkPodSucceeded) for a in cluster.sync(run_seconds=100))


def test_job_fails_after_the_backoff_limit() -> None:
    cluster = Cluster(job(completions=3, parallelism=1, backoff_limit=2))
    run_job(cluster, fail=True)
    status = cluster.obj.status
    assert status["failed"] == 3
    assert [c["type"] for c in status["conditions"]] == ["FailureTarget", "Failed"]
    assert status["conditions"][1]["reason"] == "BackoffLimitExceeded"
    assert job_finished(cluster.obj) == "Failed"
    assert cluster.sync() == []


def test_suspended_job_removes_its_active_pods() -> None:
    cluster = Cluster(job())
    cluster.sync()
    cluster.obj = msgspec.structs.replace(
        cluster.obj, spec=msgspec.structs.replace(cluster.obj.spec, suspend=True)
    )
    deletes = [a for a in cluster.sync() if isinstance(a, DeletePod)]
    assert len(deletes) == 2 and deletes[0].reason == "job suspended" and cluster.pods == {}


def test_work_queue_job_completes_when_one_succeeded_and_the_rest_finished() -> None:
    cluster = Cluster(job(completions=None, parallelism=2))
    cluster.sync()
    cluster.run_pods()
    names = sorted(cluster.pods)
    first = cluster.pods[names[0]]
    cluster.pods[names[0]] = msgspec.structs.replace(
        first, status=succeeded_status(first, "2026-03-01T12:00:01Z")
    )
    actions = cluster.sync(run_seconds=100)
    assert not any(isinstance(a, (CreatePod, DeletePod)) for a in actions)  # the other one may finish
    assert job_finished(cluster.obj) is None
    cluster.now += timedelta(seconds=100)
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
    run_job(cluster)
    assert cluster.obj.status["succeeded"] == 10 and cluster.created == 10


def test_make_container_builder_is_usable_for_pod_templates() -> None:
    assert make_container("x", claims=[("c", "r")]).resources.claims[0].request == "r"


def test_job_run_seconds_comes_from_the_flag_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.workloads.__main__ import parse_args

    monkeypatch.delenv("DRAFLOW_JOB_RUN_SECONDS", raising=False)
    assert parse_args([]).job_run_seconds == 5.0
    assert parse_args(["--job-run-seconds", "0.5"]).job_run_seconds == 0.5
    monkeypatch.setenv("DRAFLOW_JOB_RUN_SECONDS", "2")
    assert parse_args([]).job_run_seconds == 2.0
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--job-run-seconds", "-1"])
    assert exit_.value.code == 2

