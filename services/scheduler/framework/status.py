"""Plugin statuses and queueing hints, after kube-scheduler's framework (``fwk.Status``, ``fwk.Code``).

Plugins return ``None`` for success on hot paths (Filter runs for hundreds of nodes per pod, so
allocating a Status object per passing node would be measurable); a rejection or an error is a
:class:`Status` naming the plugin and the reasons, which the diagnosis counts per node.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["SKIP", "Code", "QueueingHint", "Status", "error", "pending", "unresolvable", "unschedulable"]


class Code(IntEnum):
    """Outcome of one plugin call (upstream's codes; Wait is not used by draflow).

    PENDING (upstream ``Pending``) is a Reserve plugin waiting for something outside the
    scheduler (a resource driver, a write of its own to land): the cycle ends Unschedulable on
    the chosen node, not as an error; the pod waits in the unschedulable pool until the plugin's
    queueing hint says Queue (for classic DRA: once the driver answered the published
    ``potentialNodes``), then goes to backoff like any unschedulable pod (which an idle scheduler
    pops early). Other Reserve failures stay scheduling errors."""

    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    SKIP = 5
    PENDING = 6


class QueueingHint(IntEnum):
    """What a cluster event means for a pod a plugin rejected: try again, or keep waiting."""

    SKIP = 0
    QUEUE = 1


class Status:
    """A non-success outcome: code, reasons (each one counted in the diagnosis) and the plugin."""

    __slots__ = ("code", "plugin", "reasons")

    def __init__(self, code: Code, *reasons: str, plugin: str = "") -> None:
        self.code = code
        self.reasons: tuple[str, ...] = reasons
        self.plugin = plugin

    @property
    def message(self) -> str:
        """Reasons joined as upstream's ``Status.Message()`` does."""
        return ", ".join(self.reasons)

    @property
    def rejected(self) -> bool:
        """Unschedulable, UnschedulableAndUnresolvable or Pending (upstream ``IsRejected``)."""
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING)

    @property
    def is_skip(self) -> bool:
        return self.code == Code.SKIP

    def with_plugin(self, plugin: str) -> Status:
        if self.plugin == plugin:
            return self
        return Status(self.code, *self.reasons, plugin=plugin)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Status):
            return NotImplemented
        return (self.code, self.reasons, self.plugin) == (other.code, other.reasons, other.plugin)

    def __hash__(self) -> int:
        return hash((self.code, self.reasons, self.plugin))

    def __repr__(self) -> str:
        who = f" {self.plugin}" if self.plugin else ""
        return f"Status({self.code.name}{who}: {self.message!r})"


def unschedulable(*reasons: str, plugin: str = "") -> Status:
    return Status(Code.UNSCHEDULABLE, *reasons, plugin=plugin)


def unresolvable(*reasons: str, plugin: str = "") -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, *reasons, plugin=plugin)


def pending(*reasons: str, plugin: str = "") -> Status:
    """Reserve waits for an outside change (see ``Code.PENDING``)."""
    return Status(Code.PENDING, *reasons, plugin=plugin)


def error(message: str, plugin: str = "") -> Status:
    return Status(Code.ERROR, message, plugin=plugin)


SKIP = Status(Code.SKIP)
