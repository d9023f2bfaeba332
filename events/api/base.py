"""The msgspec base class every API object and sub-object derives from, and quantity fields.

Kubernetes decodes manifests strictly (kubectl's default field validation): unknown fields are
refused and JSON names are camelCase. ``omit_defaults`` makes re-encoding give back what the user
wrote (unset optional fields stay absent), which is also what ``kubectl get -o yaml`` shows.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, ClassVar, TypeAlias

import msgspec

from draflow.events.quantity import Quantity, QuantityError

__all__ = [
    "ApiStruct",
    "FieldValueError",
    "Int32",
    "Int64",
    "QuantityValue",
    "canonical_quantity",
    "normalize_quantities",
    "set_field",
]

# Go's fixed-width integers: a value out of range is a decode error upstream, so it is here too.
Int64: TypeAlias = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
Int32: TypeAlias = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]


class ApiStruct(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    rename="camel",
    omit_defaults=True,
    gc=False,
):
    """Base of all API structs: immutable, strict, camelCase on the wire.

    ``gc=False`` (inherited): API objects are immutable trees of data that never form reference
    cycles, so the cyclic GC need not track them. A scheduler holding 5,000 nodes' slices and
    25,000 pods and claims otherwise has millions of tracked objects, and every full collection
    walks them all: a pause in proportion to the cluster.

    Top-level kinds set ``API_VERSION`` and ``KIND`` (class constants, not fields: the codec
    strips them from the manifest on decode and puts them back on encode).
    """

    API_VERSION: ClassVar[str] = ""
    KIND: ClassVar[str] = ""


# A quantity as written in a manifest. YAML/JSON numbers are accepted (as upstream, where
# resource.Quantity unmarshals numbers too); after decoding the field always holds the canonical
# string, so consumers may treat it as ``str`` and parse it with ``Quantity.parse`` when needed.
QuantityValue: TypeAlias = str | int | float


@lru_cache(maxsize=4096)
def _canonical(value: str | int | float, kind: str) -> str:
    # ``kind`` keeps 1 and 1.0 in separate cache slots (they hash alike).
    return str(Quantity.parse(value))


def canonical_quantity(value: str | int | float) -> str:
    """Canonical Kubernetes spelling of a quantity; raises QuantityError as apimachinery would."""
    return _canonical(value, type(value).__name__)


class FieldValueError(ValueError):
    """A value error inside a struct; the message carries the field name for the path translator."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{message} - at field `{field}`")


def set_field(obj: msgspec.Struct, name: str, value: Any) -> None:
    """Assign to a frozen struct during ``__post_init__`` (normalisation only)."""
    msgspec.structs.force_setattr(obj, name, value)


def normalize_quantities(obj: msgspec.Struct, *names: str) -> None:
    """Replace quantity fields (scalars, lists or string-keyed maps) by their canonical strings.

    Called from ``__post_init__``; a bad quantity becomes a decode error naming the field, as the
    Kubernetes decoder refuses it before validation runs.
    """
    for name in names:
        value = getattr(obj, name)
        if value is None:
            continue
        wire = obj.__struct_encode_fields__[obj.__struct_fields__.index(name)]
        try:
            if isinstance(value, dict):
                for key, item in value.items():
                    try:
                        value[key] = canonical_quantity(item)
                    except QuantityError as exc:
                        raise FieldValueError(f"{wire}[{key}]", str(exc)) from None
            elif isinstance(value, tuple | list):
                fixed = []
                for i, item in enumerate(value):
                    try:
                        fixed.append(canonical_quantity(item))
                    except QuantityError as exc:
                        raise FieldValueError(f"{wire}[{i}]", str(exc)) from None
                set_field(obj, name, type(value)(fixed))
            else:
                set_field(obj, name, canonical_quantity(value))
        except QuantityError as exc:
            raise FieldValueError(wire, str(exc)) from None
