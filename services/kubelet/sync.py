"""What the kubelet should do next about a pod: the level-triggered step for its shell.

The shell looks at every pod bound to its node (and at pods the DRA manager still remembers) and
asks ``next_step``; the answer depends only on the pod and the manager's state, so a restarted
kubelet picks up exactly where it stopped.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from draflow.events.api.core_v1 import Pod
from draflow.services.dra.resourceclaim import is_pod_terminal
from draflow.services.kubelet.manager import DRAManager

__all__ = ["Step", "next_step", "vanished_pods"]


class Step(Enum):
    START = "start"  # admit, prepare the claims, report Running (a refusal: Pending, tried again)
    RELEASE = "release"  # unprepare the claims, drop the reservations
    FINISH_DELETION = "finish-deletion"  # claims released: confirm the pod's deletion
    RUN = "run"  # Running here: advance the simulated containers (exits, restarts, finish)
    NOTHING = "nothing"


def next_step(pod: Pod, node_name: str, manager: DRAManager, *, held: bool = False) -> Step:
    """The next step for ``pod`` on ``node_name`` (pods bound elsewhere: nothing, unless this node
    still holds their claims). ``held``: claims prepared outside the manager (classic DRA's node
    plugins) are held for the pod."""
    uid = pod.metadata.uid
    holds_claims = held or manager.has_pod_reference(uid)
    if pod.spec.node_name != node_name:
        return Step.RELEASE if holds_claims else Step.NOTHING
    if pod.metadata.deletion_timestamp is not None:
        return Step.RELEASE if holds_claims else Step.FINISH_DELETION
    if is_pod_terminal(pod):
        return Step.RELEASE if holds_claims else Step.NOTHING
    if pod.status.phase in ("", "Pending"):
        return Step.START
    if pod.status.phase == "Running":
        return Step.RUN
    return Step.NOTHING


def vanished_pods(manager: DRAManager, pods: Iterable[Pod]) -> list[str]:
    """Uids of pods the manager still holds claims for but that no longer exist at all (deleted
    while the kubelet was down): their claims must be unprepared via ``manager.claims_of_pod``."""
    known = {p.metadata.uid for p in pods}
    return sorted(manager.referenced_pod_uids() - known)
