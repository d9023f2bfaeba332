"""The guards' versions a decision expects: a guard subject's last sequence, held back while a
take there is not yet backed by its allocation.

PreBind takes a device's guard with a single append and writes the claim's allocation right after
(:mod:`draflow.services.scheduler.sagas.guarded`). A snapshot that has the take but not yet the
allocation shows the device free at the guard's new version: a decision stamped with that version
would take the guard and double-allocate the device. So a take counts in the guard's version only
once the snapshot holds its claim (the holder, by uid) allocated with that guard's device or
counter set; until then the version is the one just before the earliest such take, and a decision
on the device conflicts and looks at who took it (a take by another instance: decide again).

A take *settles* (counts from then on) when the snapshot sees its allocation, when its holder is
released there, or when its claim is gone (deleted, or replaced by another uid: no allocation can
back the take any more, a PreBind's claim append checks the claim's version and uid). A settled
take stays settled: deallocating the claim later frees the device in the objects, which is all a
decision reads, and no guard message is needed for it (``ClaimDeallocated`` is a single append;
logs written before also carry a ``GuardReleased`` after it, which changes nothing here).

Why that is safe: a decision that lands its take at version ``v`` saw every take up to ``v``
settled, so each of their claims had been seen allocated (then freed, since the decision found
the device free) or gone; any later allocation of the device needs a later take, which moves the
guard past ``v``. A snapshot started from an objects snapshot sees only each guard's last message
and the claims as they are now: :meth:`apply` takes ``settled`` from the caller, who looks at the
claim's log when the claim changed after the take (:meth:`Snapshot._restore_guard_heads`).

Logs written before (the take in the claim's batch, after the allocation) settle every take on
arrival: the versions are the subjects' last sequences, as they always were.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.guard import GuardReleased, GuardTaken
from draflow.infra.guard import guard_subject
from draflow.services.dra.guards import PoolSlices, allocation_guard_keys

__all__ = ["GuardHeads"]


class GuardHeads(Mapping[str, int]):
    """guard subject -> the version a decision expects there (see the module docstring)."""

    def __init__(self, root: str, pool_slices: PoolSlices | None) -> None:
        self._root = root
        self._pool_slices = pool_slices
        self._last: dict[str, int] = {}  # guard subject -> its last sequence applied
        self._unbacked: dict[str, dict[int, str]] = {}  # guard subject -> {take seq: holder uid}
        self._holders: dict[str, set[str]] = {}  # holder uid -> guard subjects it has unbacked takes on

    def __getitem__(self, subject: str) -> int:
        takes = self._unbacked.get(subject)
        return min(takes) - 1 if takes else self._last[subject]

    def __iter__(self) -> Iterator[str]:
        return iter(self._last)

    def __len__(self) -> int:
        return len(self._last)

    @property
    def unbacked(self) -> dict[str, tuple[int, ...]]:
        """guard subject -> the sequences of its takes not backed yet (for tests and debugging)."""
        return {s: tuple(sorted(t)) for s, t in self._unbacked.items() if t}

    def apply(
        self, subject: str, seq: int, event: object, claim: ResourceClaim | None, *, settled: bool = False
    ) -> None:
        """A guard message at ``seq``; ``claim``: the take's holder as the snapshot has it;
        ``settled``: the caller knows the take counts already (its claim is gone, or was seen
        allocated with the device after the take)."""
        self._last[subject] = max(self._last.get(subject, 0), seq)
        if isinstance(event, GuardTaken):
            uid = event.holder_uid or event.holder
            if not settled and not self._backs(claim, uid, subject):
                self._unbacked.setdefault(subject, {})[seq] = uid
                self._holders.setdefault(uid, set()).add(subject)
        elif isinstance(event, GuardReleased):
            self._settle(subject, event.holder_uid or event.holder)

    def backs(self, claim: ResourceClaim | None, uid: str, subject: str) -> bool:
        """Whether ``claim`` (as it is) holds an allocation with the guard of ``subject``."""
        return self._backs(claim, uid, subject)

    def claim_deleted(self, uid: str) -> None:
        """The snapshot saw the claim ``uid`` deleted: nothing can back its takes any more."""
        for subject in list(self._holders.get(uid, ())):
            self._settle(subject, uid)

    def claim_changed(self, claim: ResourceClaim) -> None:
        """The snapshot applied a change of ``claim``: its allocation backs its takes."""
        uid = claim.metadata.uid
        if uid not in self._holders or claim.status.allocation is None:
            return
        for subject in list(self._holders[uid]):
            if self._backs(claim, uid, subject):
                self._settle(subject, uid)

    def _backs(self, claim: ResourceClaim | None, uid: str, subject: str) -> bool:
        if claim is None or claim.metadata.uid != uid or claim.status.allocation is None:
            return False
        keys = allocation_guard_keys(claim.status.allocation, self._pool_slices)
        return any(guard_subject(self._root, scope, key) == subject for scope, key in keys)

    def _settle(self, subject: str, uid: str) -> None:
        takes = self._unbacked.get(subject)
        if takes:
            for seq in [s for s, holder in takes.items() if holder == uid]:
                del takes[seq]
            if not takes:
                del self._unbacked[subject]
        subjects = self._holders.get(uid)
        if subjects is not None:
            subjects.discard(subject)
            if not subjects:
                del self._holders[uid]
