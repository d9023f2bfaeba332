"""The ``DefaultTolerationSeconds`` admission plugin (``plugin/pkg/admission/defaulttolerationseconds``).

On every Pod create and update, a pod that does not already tolerate ``node.kubernetes.io/not-ready``
and ``node.kubernetes.io/unreachable`` with effect NoExecute (a toleration with that key or an empty
key, and effect NoExecute or empty) gets ``{key, operator: Exists, effect: NoExecute,
tolerationSeconds: N}`` appended for each, N from the apiserver's
``--default-not-ready-toleration-seconds`` / ``--default-unreachable-toleration-seconds`` (300).
So a pod on a node that stops answering is evicted five minutes after the node is tainted,
unless it says otherwise. Pods only; pod templates get theirs when their pods are created.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from msgspec.structs import replace

from draflow.events.api import core_v1 as c1
from draflow.events.api.base import ApiStruct

__all__ = ["DEFAULT_TOLERATION_SECONDS", "NOT_READY", "UNREACHABLE", "DefaultTolerationSeconds"]

S = TypeVar("S", bound=ApiStruct)

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300


def _tolerates_no_execute(tolerations: tuple[c1.Toleration, ...], key: str) -> bool:
    return any(t.key in (key, "") and t.effect in ("NoExecute", "") for t in tolerations)


@dataclass(frozen=True)
class DefaultTolerationSeconds:
    not_ready_seconds: int = DEFAULT_TOLERATION_SECONDS
    unreachable_seconds: int = DEFAULT_TOLERATION_SECONDS

    def admit(self, obj: S) -> S:
        """``obj`` with the default tolerations added (objects other than Pods unchanged)."""
        if not isinstance(obj, c1.Pod):
            return obj
        tolerations = obj.spec.tolerations
        added = tuple(
            c1.Toleration(key=key, operator="Exists", effect="NoExecute", toleration_seconds=seconds)
            for key, seconds in ((NOT_READY, self.not_ready_seconds), (UNREACHABLE, self.unreachable_seconds))
            if not _tolerates_no_execute(tolerations, key)
        )
        if not added:
            return obj
        return replace(obj, spec=replace(obj.spec, tolerations=(*tolerations, *added)))
