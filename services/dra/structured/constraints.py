"""matchAttribute and distinctAttribute claim constraints.

Both keep a stack of what the devices taken so far contributed, because the search adds and
removes devices strictly last-in-first-out. Attribute values are (kind, set) pairs: a scalar is a
one-element set, so the list-attribute rules (non-empty running intersection for matchAttribute,
pairwise disjoint sets for distinctAttribute) reduce to plain equality for scalars. Values of
different kinds never match and never collide, as upstream.

With list attributes switched off (Features.list_type_attributes), upstream's scalar-only rules
apply: a list value is only accepted as the first value, and lists never equal anything.

Deviation: upstream keys distinctAttribute's recorded values by request name, so two devices of
one request overwrite each other and are never compared; here every covered device's value must
differ from all others, also within one request.
"""

from __future__ import annotations

from collections.abc import Iterable

from draflow.services.dra.structured.prepared import AttrValue, PreparedDevice

__all__ = ["Constraint", "DistinctAttribute", "MatchAttribute"]


class Constraint:
    """Common part: which requests the constraint covers (empty = all)."""

    __slots__ = ("attribute", "lists", "requests", "stack")

    def __init__(self, attribute: str, requests: Iterable[str], lists: bool = True) -> None:
        self.attribute = attribute
        self.requests = frozenset(requests)
        self.lists = lists
        self.stack: list[AttrValue] = []

    kind = "constraint"

    @property
    def label(self) -> str:
        """How the diagnosis names it: ``matchAttribute gpu.example.com/model``."""
        return f"{self.kind} {self.attribute}"

    def covers(self, request: str, subrequest: str | None) -> bool:
        if not self.requests:
            return True
        if request in self.requests:
            return True
        return subrequest is not None and f"{request}/{subrequest}" in self.requests

    def add(self, device: PreparedDevice) -> bool:
        raise NotImplementedError

    def remove(self) -> None:
        self.stack.pop()


class MatchAttribute(Constraint):
    """All covered devices share a value (lists: a common element)."""

    __slots__ = ()
    kind = "matchAttribute"

    def add(self, device: PreparedDevice) -> bool:
        value = device.qattrs.get(self.attribute)
        if value is None:
            return False
        stack = self.stack
        if not stack:
            stack.append(value)
            return True
        kind, current, was_list = stack[-1]
        if value[0] != kind:
            return False
        if not self.lists and (was_list or value[2]):
            return False
        common = current & value[1]
        if not common:
            return False
        stack.append((kind, common, was_list))
        return True


class DistinctAttribute(Constraint):
    """No two covered devices share a value (lists: pairwise disjoint)."""

    __slots__ = ()
    kind = "distinctAttribute"

    def add(self, device: PreparedDevice) -> bool:
        value = device.qattrs.get(self.attribute)
        if value is None:
            return False
        kind, values, is_list = value
        if not self.lists and is_list and self.stack:
            return False
        for other_kind, other, other_list in self.stack:
            if other_kind == kind and not values.isdisjoint(other) and (self.lists or not other_list):
                return False
        self.stack.append(value)
        return True
