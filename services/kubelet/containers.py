"""The simulated container runtime: containers exit, restart with back-off, and pods finish.

Given a Running pod's container statuses (from the log) and the clock, :func:`advance` says what
its containers did since: each container runs its program (``draflow.services.runtime.programs``); when
it exits, ``spec.restartPolicy`` decides, as the kubelet does —

* ``Always`` restarts it, ``OnFailure`` restarts it when the exit code is not 0, ``Never`` leaves
  it terminated (state ``terminated``, reason ``Completed`` for 0, else ``Error``);
* a restart is immediate the first time; later ones wait the kubelet's crash-loop back-off
  (10 s, doubling per restart, at most 5 min: ``flowcontrol.Backoff`` keyed per container), the
  container ``waiting`` with reason ``CrashLoopBackOff`` and message ``back-off 20s restarting
  failed container=<c> pod=<pod>_<ns>(<uid>)``, its ``lastState`` the terminated run, and
  ``restartCount`` counting the restarts;
* the pod phase is the kubelet's ``getPhase`` over the regular containers: Running while one runs
  or restarts (``Always``, or ``OnFailure`` with a failure), Succeeded when all exited 0,
  Failed when all stopped and one failed under ``Never``.

Pure: every time comes from the statuses (``startedAt``, ``finishedAt``) and the ``now`` the shell
passes, so the same statuses and clock give the same answer; the shell appends what changed
and wakes up at ``next_at``. Init containers count as completed when the pod starts (not
simulated); the back-off is not reset after a long run (upstream: after 10 minutes).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from draflow.events.api.core_v1 import Container, Pod
from draflow.services.runtime.programs import Program, program_of

__all__ = [
    "BACKOFF_BASE_S",
    "BACKOFF_MAX_S",
    "Advance",
    "advance",
    "go_duration",
    "pod_phase",
    "restart_delay",
]

BACKOFF_BASE_S = 10.0  # kubelet: initial container restart back-off
BACKOFF_MAX_S = 300.0  # kubelet: MaxContainerBackOff
CRASH_LOOP = "CrashLoopBackOff"


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def go_duration(seconds: float) -> str:
    """Go's ``time.Duration.String`` for whole seconds (``10s``, ``1m20s``, ``5m0s``)."""
    total = int(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def restart_delay(restart: int, base_s: float = BACKOFF_BASE_S, max_s: float = BACKOFF_MAX_S) -> float:
    """The wait before the ``restart``-th restart (1, 2, ...): none for the first, then the
    back-off doubling from ``base_s`` up to ``max_s``."""
    if restart <= 1:
        return 0.0
    return float(min(base_s * 2 ** (restart - 2), max_s))


def _restarts(policy: str, exit_code: int) -> bool:
    return policy in ("", "Always") or (policy == "OnFailure" and exit_code != 0)


def pod_label(pod: Pod) -> str:
    """``format.Pod``: ``<name>_<namespace>(<uid>)``."""
    meta = pod.metadata
    return f"{meta.name}_{meta.namespace}({meta.uid})"


@dataclass(frozen=True, slots=True)
class Advance:
    """What happened: the new statuses (``changed``), the phase, the containers that entered
    CrashLoopBackOff (for the ``BackOff`` Warning), and when to look again (None: nothing due)."""

    container_statuses: tuple[dict[str, Any], ...]
    phase: str
    changed: bool
    backoffs: tuple[str, ...] = ()
    next_at: datetime | None = None


def _terminated(program: Program, started: datetime, finished: datetime) -> dict[str, Any]:
    return {
        "exitCode": program.exit_code,
        "reason": "Completed" if program.exit_code == 0 else "Error",
        "startedAt": _stamp(started),
        "finishedAt": _stamp(finished),
    }


def _advance_one(
    pod: Pod, container: Container, status: dict[str, Any], now: datetime, base_s: float, max_s: float
) -> tuple[dict[str, Any], bool, datetime | None]:
    """(new status, entered CrashLoopBackOff, when next due) for one container."""
    program = program_of(pod, container)
    policy = pod.spec.restart_policy
    status = dict(status)
    backoff = False
    for _ in range(10_000):  # each turn moves the container's own time forward
        state = status.get("state") or {}
        restarts = int(status.get("restartCount") or 0)
        if "running" in state:
            if program.run_s is None:
                return status, backoff, None
            started = _parse(state["running"]["startedAt"])
            finished = started + timedelta(seconds=program.run_s)
            if finished > now:
                return status, backoff, finished
            terminated = _terminated(program, started, finished)
            if not _restarts(policy, program.exit_code):
                status.update(state={"terminated": terminated}, ready=False, started=False)
                return status, backoff, None
            status["lastState"] = {"terminated": terminated}
            delay = restart_delay(restarts + 1, base_s, max_s)
            if delay == 0:
                running = {"running": {"startedAt": terminated["finishedAt"]}}
                status.update(state=running, restartCount=restarts + 1, ready=True, started=True)
                continue
            message = (
                f"back-off {go_duration(delay)} restarting failed "
                f"container={container.name} pod={pod_label(pod)}"
            )
            waiting = {"waiting": {"reason": CRASH_LOOP, "message": message}}
            status.update(state=waiting, ready=False, started=False)
            backoff = True
            continue
        waiting = state.get("waiting") or {}
        last = (status.get("lastState") or {}).get("terminated")
        if waiting.get("reason") == CRASH_LOOP and last:
            due = _parse(last["finishedAt"]) + timedelta(seconds=restart_delay(restarts + 1, base_s, max_s))
            if due > now:
                return status, backoff, due
            running = {"running": {"startedAt": _stamp(due)}}
            status.update(state=running, restartCount=restarts + 1, ready=True, started=True)
            continue
        return status, backoff, None  # terminated for good, or not started by us
    return status, backoff, now  # pragma: no cover - a program that loops without time passing


def pod_phase(pod: Pod, statuses: tuple[dict[str, Any], ...]) -> str:
    """The kubelet's ``getPhase`` for a started pod (regular containers; init containers done)."""
    by_name = {s.get("name"): s for s in statuses}
    running = waiting = stopped = succeeded = unknown = 0
    for c in pod.spec.containers:
        s = by_name.get(c.name)
        state = (s or {}).get("state") or {}
        if s is None or not state:
            unknown += 1
        elif "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"].get("exitCode") == 0
        elif (s.get("lastState") or {}).get("terminated"):
            stopped += 1
        else:
            waiting += 1
    policy = pod.spec.restart_policy or "Always"
    if waiting:
        return "Pending"
    if running and not unknown:
        return "Running"
    if not running and stopped and not unknown:
        if policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


def advance(
    pod: Pod, now: datetime, *, backoff_base_s: float = BACKOFF_BASE_S, backoff_max_s: float = BACKOFF_MAX_S
) -> Advance:
    """What the containers of Running ``pod`` did up to ``now`` (see the module docstring)."""
    by_name = {s.get("name"): s for s in pod.status.container_statuses}
    statuses: list[dict[str, Any]] = []
    backoffs: list[str] = []
    next_at: datetime | None = None
    for c in pod.spec.containers:
        old = by_name.get(c.name)
        if old is None:
            continue
        new, backoff, due = _advance_one(pod, c, old, now, backoff_base_s, backoff_max_s)
        statuses.append(new)
        if backoff:
            backoffs.append(c.name)
        if due is not None and (next_at is None or due < next_at):
            next_at = due
    result = tuple(statuses)
    changed = result != tuple(by_name[c.name] for c in pod.spec.containers if c.name in by_name)
    return Advance(
        container_statuses=result,
        phase=pod_phase(pod, result),
        changed=changed,
        backoffs=tuple(backoffs),
        next_at=next_at,
    )
