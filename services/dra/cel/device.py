"""The ``device`` variable: one device's driver, attributes and capacity, prepared once.

The allocator builds a :class:`DeviceInput` once per device (per slice generation) and evaluates
every selector against it. Attribute and capacity names are normalised to fully qualified
``domain/id`` keys in flat dicts, which is what compiled selectors read for the common
``device.attributes["domain"].id`` form; the nested ``domain -> id -> value`` maps upstream
exposes are built only when an expression needs the map itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from events.quantity import Quantity

from .library.semver import SemverError, parse_semver

__all__ = ["EMPTY_MAP", "DefaultingMap", "DeviceInput", "Version", "prepare_device"]


class Version(str):
    """A ``version`` attribute value (semver text); plain ``str`` values are string attributes."""

    __slots__ = ()


class DefaultingMap(dict[str, Any]):
    """``device.attributes`` / ``device.capacity``: looking up an unknown domain yields an empty map
    (and ``has()``/``.?`` consider every domain present), exactly as Kubernetes' DRA environment."""

    __slots__ = ()


EMPTY_MAP: Final[dict[str, Any]] = {}


class DeviceInput:
    """Prepared CEL input for one device. Treat as immutable; safe to share across selectors."""

    __slots__ = ("_attributes", "_capacity", "allow_multiple_allocations", "attrs", "caps", "driver", "error")
    cel_type_name = "kubernetes.DRADevice"

    driver: str
    allow_multiple_allocations: bool
    attrs: dict[str, Any]
    caps: dict[str, Quantity]
    error: str | None

    def __init__(
        self,
        driver: str,
        attrs: dict[str, Any],
        caps: dict[str, Quantity],
        allow_multiple_allocations: bool,
        error: str | None = None,
    ) -> None:
        self.driver = driver
        self.attrs = attrs
        self.caps = caps
        self.allow_multiple_allocations = allow_multiple_allocations
        self.error = error
        self._attributes: DefaultingMap | None = None
        self._capacity: DefaultingMap | None = None

    @property
    def attributes(self) -> DefaultingMap:
        if self._attributes is None:
            self._attributes = _nest(self.attrs)
        return self._attributes

    @property
    def capacity(self) -> DefaultingMap:
        if self._capacity is None:
            self._capacity = _nest(self.caps)
        return self._capacity

    def field(self, name: str) -> Any:
        """The CEL field ``device.<name>``."""
        if name == "driver":
            return self.driver
        if name == "attributes":
            return self.attributes
        if name == "capacity":
            return self.capacity
        if name == "allowMultipleAllocations":
            return self.allow_multiple_allocations
        raise KeyError(name)

    def __repr__(self) -> str:
        return f"DeviceInput(driver={self.driver!r}, attrs={self.attrs!r}, caps={self.caps!r})"


def _nest(flat: Mapping[str, Any]) -> DefaultingMap:
    out = DefaultingMap()
    for key, value in flat.items():
        domain, _, ident = key.partition("/")
        inner = out.get(domain)
        if inner is None:
            inner = out[domain] = {}
        inner[ident] = value
    return out


def _qualify(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def _convert(value: object) -> Any:
    """Attribute value -> CEL value; raises ValueError with upstream's message when unusable."""
    if isinstance(value, Version):
        try:
            return parse_semver(str(value))
        except SemverError as exc:
            raise ValueError(f"parse semantic version: {exc}") from None
    if type(value) in (bool, int, str):
        return value
    if isinstance(value, (list, tuple)):
        return [_convert(v) for v in value]
    raise ValueError("unsupported attribute value")


def prepare_device(
    driver: str,
    attributes: Mapping[str, object],
    capacity: Mapping[str, Quantity],
    allow_multiple_allocations: bool | None = None,
) -> DeviceInput:
    """Build the CEL input for one device.

    ``attributes`` maps the names as written in the ResourceSlice (``domain/id`` or a bare ``id``
    of the driver's domain) to ``int``/``bool``/``str``/:class:`Version` or lists of those; any
    other value (e.g. ``None`` for an attribute with no value set) makes every evaluation on this
    device fail with a CEL runtime error, as upstream fails building its input.
    """
    attrs: dict[str, Any] = {}
    error: str | None = None
    prefix = driver + "/"
    for name, value in attributes.items():
        key = name if "/" in name else prefix + name
        kind = type(value)
        if kind is str or kind is int or kind is bool:
            attrs[key] = value
            continue
        try:
            attrs[key] = _convert(value)
        except ValueError as exc:
            if error is None:
                error = f"attribute {name}: {exc}"
    caps = {(name if "/" in name else prefix + name): q for name, q in capacity.items()}
    return DeviceInput(driver, attrs, caps, bool(allow_multiple_allocations), error)
