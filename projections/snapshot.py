"""The object fold as bytes: an :class:`ObjectIndex` encoded for a snapshot, and decoded again.

Every process that follows the log keeps the same fold (the apiserver's store, each controller's
cache, the scheduler's and the quota reconciler's indexes keep a subset of its kinds), so one
snapshot of it, at a log position, lets each of them start there and fold only the events after
it. Pure: no I/O (``draflow.infra.snapshots`` stores the bytes).

``schema`` names the layout of the objects and of this encoding: a hash of the JSON schema of every
stored kind's Struct plus ``FORMAT``. A snapshot written by code whose objects have other fields
does not decode to what the fold would give, so a loader compares the two and ignores a snapshot of
another schema. Bump ``FORMAT`` when a reducer changes what it folds to (same Structs, other
state).
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import msgspec

from draflow.events.api.apiextensions_v1 import CustomObject
from draflow.events.api.base import ApiStruct
from draflow.events.api.registry import resource_types
from draflow.events.objects import EVENT_KIND, KubeEvent
from draflow.projections.objects import ObjectIndex

__all__ = [
    "FORMAT",
    "OBJECTS",
    "SnapshotDecodeError",
    "decode_index",
    "encode_index",
    "schema",
    "stored_kinds",
]

OBJECTS = "objects"  # the snapshot's name
FORMAT = 2  # 2: custom objects (of CRDs) are held too


class SnapshotDecodeError(ValueError):
    """The bytes are not an object index this code can read."""


class _Image(msgspec.Struct, frozen=True, array_like=True):
    # kind -> [(namespace, name, the object as msgpack)]
    objects: dict[str, list[tuple[str, str, msgspec.Raw]]]
    # (kind, namespace, name, version): every subject's version, deleted objects' included
    versions: list[tuple[str, str, str, int]]
    # the kinds of ``objects`` that are custom (a CRD's): stored as CustomObject, whatever the kind
    custom: list[str] = []


@functools.cache
def _structs() -> dict[str, type[Any]]:
    # the built-in kinds; a custom kind (a CRD's) comes and goes with its CRD, so the image names
    # its custom kinds and every one of them is a CustomObject
    out: dict[str, type[Any]] = {rt.kind: rt.struct for rt in resource_types() if not rt.crd}
    out[EVENT_KIND] = KubeEvent
    return out


def stored_kinds() -> frozenset[str]:
    """The built-in kinds the object fold keeps (every one and Kubernetes Events); it also keeps
    the custom kinds of the CRDs it holds."""
    return frozenset(_structs())


@functools.cache
def _decoders() -> dict[str, msgspec.msgpack.Decoder[Any]]:
    return {kind: msgspec.msgpack.Decoder(struct) for kind, struct in _structs().items()}


_custom_decoder = msgspec.msgpack.Decoder(CustomObject)


@functools.cache
def schema() -> str:
    """The version a snapshot of the object fold is written and read with."""
    structs = _structs()
    kinds = sorted(structs)
    (_, components) = msgspec.json.schema_components([structs[k] for k in kinds] + [CustomObject])
    text = msgspec.json.encode([FORMAT, kinds, components], order="sorted")
    return f"{FORMAT}-{hashlib.sha256(text).hexdigest()[:16]}"


_encoder = msgspec.msgpack.Encoder()
_image_decoder = msgspec.msgpack.Decoder(_Image)


def encode_index(
    objects: dict[str, dict[tuple[str, str], ApiStruct]], versions: dict[tuple[str, str, str], int]
) -> bytes:
    """Encode an :meth:`ObjectIndex.image` (safe in another thread: the image is a private copy)."""
    encode = _encoder.encode
    image = _Image(
        objects={
            kind: [(ns, name, msgspec.Raw(encode(obj))) for (ns, name), obj in objs.items()]
            for kind, objs in objects.items()
        },
        versions=[(k, ns, n, v) for (k, ns, n), v in versions.items()],
        custom=sorted(kind for kind in objects if kind not in _structs()),
    )
    return _encoder.encode(image)


def decode_index(data: bytes, kinds: frozenset[str] | None = None) -> ObjectIndex:
    """The index ``data`` encodes; only ``kinds`` (all when None), for processes that fold a subset."""
    try:
        image = _image_decoder.decode(data)
        decoders = _decoders()
        custom = frozenset(image.custom)
        objects: dict[str, dict[tuple[str, str], ApiStruct]] = {}
        for kind, items in image.objects.items():
            if kinds is not None and kind not in kinds:
                continue
            decoder = _custom_decoder if kind in custom else decoders.get(kind)
            if decoder is None:
                raise SnapshotDecodeError(f"kind {kind!r} is not served")
            objects[kind] = {(ns, name): decoder.decode(raw) for ns, name, raw in items}
        versions = {(k, ns, n): v for k, ns, n, v in image.versions if kinds is None or k in kinds}
    except (msgspec.DecodeError, TypeError, ValueError) as exc:
        if isinstance(exc, SnapshotDecodeError):
            raise
        raise SnapshotDecodeError(str(exc)) from exc
    return ObjectIndex.from_image(objects, versions)
