"""The simulated container runtime (issue 23 item 3), pure: programs, exits, restarts, pod phase."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from draflow.events.api.core_v1 import Pod
from draflow.services.kubelet.containers import advance, go_duration, pod_phase, restart_delay
from draflow.services.kubelet.node import running_status
from draflow.services.runtime.programs import (
    RUN_ANNOTATION_PREFIX,
    RUN_SECONDS_ANNOTATION,
    Program,
    parse_command,
    parse_script,
    program_of,
)

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("script", "program"),
    [
        ("true", Program(0.0, 0)),
        ("false", Program(0.0, 1)),
        ("exit 3", Program(0.0, 3)),
        ("sleep 1; exit 1", Program(1.0, 1)),
        ("sleep 1.5 && false", Program(1.5, 1)),
        ("false && sleep 5 || exit 4", Program(0.0, 4)),
        ("true || sleep 5; sleep 2m", Program(120.0, 0)),
        ("sleep 1\nexit", Program(1.0, 0)),
        ("sleep infinity", Program(None)),
        ("", Program(0.0, 0)),
        ("exit 300", Program(0.0, 300 & 0xFF)),
    ],
)
def test_scripts_the_simulation_understands(script: str, program: Program) -> None:
    assert parse_script(script) == program


@pytest.mark.parametrize(
    "script",
    [
        "echo hi",
        "env | grep user_a=b",
        "export; trap 'exit 0' TERM; sleep 9999 & wait",  # the examples' long-running containers
        "sleep soon",
        "exit x",
        "nvidia-smi -L",
    ],
)
def test_scripts_it_does_not_understand(script: str) -> None:
    assert parse_script(script) is None


def test_exec_form_commands() -> None:
    assert parse_command(["true"]) == Program(0.0, 0)
    assert parse_command(["/bin/false"]) == Program(0.0, 1)
    assert parse_command(["sleep", "10"]) == Program(10.0, 0)
    assert parse_command(["sh", "-c", "sleep 1; exit 1"]) == Program(1.0, 1)
    assert parse_command(["/bin/bash", "-c", "exit 2", "arg0"]) == Program(0.0, 2)
    assert parse_command([]) is None  # the image's entrypoint: unknown
    assert parse_command(["sh"]) is None
    assert parse_command(["/bin/program"]) is None


def pod(
    *commands: tuple[str, ...],
    policy: str = "Always",
    annotations: dict[str, str] | None = None,
    at: datetime = T0,
) -> Pod:
    """A Running pod (started at ``at``) with one container per command (``c0``, ``c1``, ...)."""
    raw = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": annotations or {}},
        "spec": {
            "restartPolicy": policy,
            "nodeName": "node-1",
            "containers": [
                {"name": f"c{i}", "image": "busybox", "command": list(cmd)} for i, cmd in enumerate(commands)
            ],
        },
    }
    p = msgspec.convert(raw, type=Pod)
    return msgspec.structs.replace(p, status=running_status(p, at))


def step(p: Pod, now: datetime) -> tuple[Pod, Any]:
    result = advance(p, now)
    status = msgspec.structs.replace(
        p.status, container_statuses=result.container_statuses, phase=result.phase
    )
    return msgspec.structs.replace(p, status=status), result


def test_program_precedence() -> None:
    p = pod(("sh", "-c", "sleep 3"), annotations={RUN_ANNOTATION_PREFIX + "c0": "exit 7"})
    assert program_of(p, p.spec.containers[0]) == Program(0.0, 7)  # the annotation first
    p = pod(("sh", "-c", "sleep 3"), annotations={RUN_SECONDS_ANNOTATION: "9"})
    assert program_of(p, p.spec.containers[0]) == Program(3.0, 0)  # then an understood command
    p = pod(("nvidia-smi", "-L"), annotations={RUN_SECONDS_ANNOTATION: "9"})
    assert program_of(p, p.spec.containers[0]) == Program(9.0, 0)  # then the run-seconds annotation
    p = pod(("nvidia-smi", "-L"))
    assert program_of(p, p.spec.containers[0]).forever  # else until stopped


def test_a_container_that_runs_until_stopped_changes_nothing() -> None:
    p = pod(())
    result = advance(p, T0 + timedelta(days=30))
    assert not result.changed and result.phase == "Running" and result.next_at is None


@pytest.mark.parametrize(
    ("command", "phase", "reason"), [(("true",), "Succeeded", "Completed"), (("false",), "Failed", "Error")]
)
def test_never_restart_ends_the_pod(command: tuple[str, ...], phase: str, reason: str) -> None:
    p = pod(command, policy="Never")
    p, result = step(p, T0)
    (c,) = result.container_statuses
    assert result.changed and result.phase == phase
    assert c["state"]["terminated"]["reason"] == reason
    assert (
        c["state"]["terminated"]["startedAt"]
        == c["state"]["terminated"]["finishedAt"]
        == "2026-03-01T12:00:00Z"
    )
    assert (c["ready"], c["restartCount"]) == (False, 0)


def test_a_container_exits_after_its_run_time() -> None:
    p = pod(("sh", "-c", "sleep 30; exit 0"), policy="Never")
    early = advance(p, T0 + timedelta(seconds=29))
    assert not early.changed and early.next_at == T0 + timedelta(seconds=30)
    _, done = step(p, T0 + timedelta(seconds=30))
    assert done.phase == "Succeeded"
    assert done.container_statuses[0]["state"]["terminated"]["finishedAt"] == "2026-03-01T12:00:30Z"


def test_restart_always_with_crash_loop_backoff() -> None:
    """``sleep 1; exit 1`` with Always: restarted at once after the first exit, then back-off
    10 s, 20 s, ...; the pod stays Running; ``restartCount`` counts the restarts."""
    p = pod(("sh", "-c", "sleep 1; exit 1"))
    p, r = step(p, T0 + timedelta(seconds=1))  # exit 1 at 12:00:01, restarted at once
    (c,) = r.container_statuses
    assert r.phase == "Running" and c["restartCount"] == 1 and "running" in c["state"]
    assert c["lastState"]["terminated"]["exitCode"] == 1 and not r.backoffs
    assert r.next_at == T0 + timedelta(seconds=2)

    p, r = step(p, T0 + timedelta(seconds=2))  # exits again: back-off 10 s
    (c,) = r.container_statuses
    assert r.phase == "Running" and r.backoffs == ("c0",) and not c["ready"]
    assert c["state"]["waiting"] == {
        "reason": "CrashLoopBackOff",
        "message": "back-off 10s restarting failed container=c0 pod=p_ns(u1)",
    }
    assert c["lastState"]["terminated"]["finishedAt"] == "2026-03-01T12:00:02Z"
    assert r.next_at == T0 + timedelta(seconds=12)
    assert not advance(p, T0 + timedelta(seconds=11)).changed

    p, r = step(p, T0 + timedelta(seconds=12))  # restart 2 ...
    (c,) = r.container_statuses
    assert c["restartCount"] == 2 and c["state"]["running"]["startedAt"] == "2026-03-01T12:00:12Z"
    p, r = step(p, T0 + timedelta(seconds=13))  # ... exits: back-off 20 s
    assert "back-off 20s" in r.container_statuses[0]["state"]["waiting"]["message"]

    # a kubelet that was away catches up in one step, to the same state
    _, far = step(pod(("sh", "-c", "sleep 1; exit 1")), T0 + timedelta(seconds=13))
    assert far.container_statuses == r.container_statuses


def test_on_failure_restarts_failures_only() -> None:
    _, ok = step(pod(("true",), policy="OnFailure"), T0)
    assert ok.phase == "Succeeded"
    _, bad = step(pod(("false",), policy="OnFailure"), T0)
    assert bad.phase == "Running" and bad.container_statuses[0]["restartCount"] == 1


def test_phase_of_several_containers() -> None:
    """getPhase: Running while one runs; all stopped: Succeeded when all exited 0, Failed under
    Never when one failed."""
    _, r = step(pod(("true",), ("sleep", "60"), policy="Never"), T0)
    assert r.phase == "Running"
    _, r = step(pod(("true",), ("sleep", "60"), policy="Never"), T0 + timedelta(seconds=60))
    assert r.phase == "Succeeded"
    _, r = step(pod(("false",), ("sleep", "60"), policy="Never"), T0 + timedelta(seconds=60))
    assert r.phase == "Failed"
    p = pod(("true",), policy="Never")
    assert pod_phase(p, ()) == "Pending"  # nothing known yet


def test_backoff_and_duration_text() -> None:
    assert [restart_delay(n) for n in range(1, 9)] == [0, 10, 20, 40, 80, 160, 300, 300]
    assert [go_duration(s) for s in (10, 80, 300, 3725)] == ["10s", "1m20s", "5m0s", "1h2m5s"]


def test_reported_statuses_move_the_ready_conditions() -> None:
    """The runtime's report (with ``at``) sets ContainersReady/Ready from the containers' ``ready``
    flags, as the kubelet's status manager does; a report without ``at`` leaves them alone."""
    from draflow.events.node import PodContainerStatusesReported
    from draflow.projections.objects import fold

    p, r = step(pod(("sh", "-c", "sleep 1; exit 1")), T0 + timedelta(seconds=2))  # in back-off
    quiet = PodContainerStatusesReported(container_statuses=r.container_statuses)
    before = {c.type: c.status for c in p.status.conditions}
    assert {c.type: c.status for c in fold(p, quiet.type_name(), quiet, 7).status.conditions} == before
    report = PodContainerStatusesReported(container_statuses=r.container_statuses, at="2026-03-01T12:00:02Z")
    folded = fold(p, report.type_name(), report, 8)
    ready = {c.type: c for c in folded.status.conditions}
    for kind in ("ContainersReady", "Ready"):
        assert (ready[kind].status, ready[kind].reason, ready[kind].message) == (
            "False",
            "ContainersNotReady",
            "containers with unready status: [c0]",
        )
    _, again = step(folded, T0 + timedelta(seconds=12))  # restarted: ready again
    report = PodContainerStatusesReported(
        container_statuses=again.container_statuses, at="2026-03-01T12:00:12Z"
    )
    ready = {c.type: c for c in fold(folded, report.type_name(), report, 9).status.conditions}
    assert ready["Ready"].status == "True" and ready["Ready"].reason == ""
