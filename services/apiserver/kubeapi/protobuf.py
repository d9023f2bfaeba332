"""Kubernetes' protobuf request bodies, for the kinds kubectl's typed generators send that way.

kubectl sends ``application/vnd.kubernetes.protobuf`` for objects it builds itself with a typed
client (``kubectl create namespace|deployment|job``); everything else it sends as JSON. A body is the magic
``k8s\\x00`` and a ``runtime.Unknown`` (``typeMeta`` 1: apiVersion 1, kind 2; ``raw`` 2) whose raw
bytes are the object. The object is decoded with the field numbers of Kubernetes'
``generated.proto`` for what those generators fill in (``_SCHEMAS``: Namespace, Deployment and Job
with their pod template's containers, and the reviews of ``kubectl auth whoami|can-i``); fields
outside the table are skipped, any other kind is refused with 415, so the client says what it
could not send.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAGIC", "ProtobufError", "decode_body"]

MAGIC = b"k8s\x00"


class ProtobufError(ValueError):
    pass


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data):
            raise ProtobufError("truncated varint")
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of a message: varints as ints, length-delimited as bytes."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            out.append((number, value))
        elif wire == 2:
            size, i = _varint(data, i)
            if i + size > len(data):
                raise ProtobufError("truncated field")
            out.append((number, data[i : i + size]))
            i += size
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return out


# message -> field number -> (JSON name, kind); kind: "string", "int", "map", "strings", or a message
_SCHEMAS: dict[str, dict[int, tuple[str, str]]] = {
    "ObjectMeta": {
        1: ("name", "string"),
        2: ("generateName", "string"),
        3: ("namespace", "string"),
        11: ("labels", "map"),
        12: ("annotations", "map"),
        14: ("finalizers", "strings"),
    },
    "Namespace": {1: ("metadata", "ObjectMeta"), 2: ("spec", "NamespaceSpec")},
    "NamespaceSpec": {1: ("finalizers", "strings")},
    "Deployment": {1: ("metadata", "ObjectMeta"), 2: ("spec", "DeploymentSpec")},
    "DeploymentSpec": {
        1: ("replicas", "int"),
        2: ("selector", "LabelSelector"),
        3: ("template", "PodTemplateSpec"),
        5: ("minReadySeconds", "int"),
        6: ("revisionHistoryLimit", "int"),
        9: ("progressDeadlineSeconds", "int"),
    },
    "Job": {1: ("metadata", "ObjectMeta"), 2: ("spec", "JobSpec")},
    "JobSpec": {
        1: ("parallelism", "int"),
        2: ("completions", "int"),
        3: ("activeDeadlineSeconds", "int"),
        6: ("template", "PodTemplateSpec"),
        7: ("backoffLimit", "int"),
    },
    "LabelSelector": {1: ("matchLabels", "map")},
    "PodTemplateSpec": {1: ("metadata", "ObjectMeta"), 2: ("spec", "PodSpec")},
    "PodSpec": {
        2: ("containers", "Container*"),
        3: ("restartPolicy", "string"),
        4: ("terminationGracePeriodSeconds", "int"),
        7: ("nodeSelector", "map"),
        10: ("nodeName", "string"),
        20: ("initContainers", "Container*"),
    },
    "Container": {
        1: ("name", "string"),
        2: ("image", "string"),
        3: ("command", "strings"),
        4: ("args", "strings"),
        5: ("workingDir", "string"),
        14: ("imagePullPolicy", "string"),
    },
    # kubectl auth whoami / can-i (authentication.k8s.io/v1, authorization.k8s.io/v1)
    "SelfSubjectReview": {1: ("metadata", "ObjectMeta")},
    "SelfSubjectAccessReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "SelfSubjectAccessReviewSpec")},
    "SelfSubjectAccessReviewSpec": {
        1: ("resourceAttributes", "ResourceAttributes"),
        2: ("nonResourceAttributes", "NonResourceAttributes"),
    },
    "ResourceAttributes": {
        1: ("namespace", "string"),
        2: ("verb", "string"),
        3: ("group", "string"),
        4: ("version", "string"),
        5: ("resource", "string"),
        6: ("subresource", "string"),
        7: ("name", "string"),
    },
    "NonResourceAttributes": {1: ("path", "string"), 2: ("verb", "string")},
}


def _message(data: bytes, name: str) -> dict[str, Any]:
    schema = _SCHEMAS[name]
    out: dict[str, Any] = {}
    for number, value in fields(data):
        if number not in schema:
            continue  # server-set or unknown to this decoder: the server ignores them on create
        key, kind = schema[number]
        if kind == "int":
            out[key] = value
            continue
        if not isinstance(value, bytes):
            raise ProtobufError(f"{name}.{key}: expected a length-delimited field")
        if kind == "string":
            out[key] = value.decode()
        elif kind == "strings":
            out.setdefault(key, []).append(value.decode())
        elif kind == "map":
            entry = {n: v for n, v in fields(value)}
            k, v = entry.get(1, b""), entry.get(2, b"")
            if isinstance(k, bytes) and isinstance(v, bytes):
                out.setdefault(key, {})[k.decode()] = v.decode()
        elif kind.endswith("*"):  # a repeated message
            out.setdefault(key, []).append(_message(value, kind[:-1]))
        else:
            out[key] = _message(value, kind)
    return out


def decode_body(body: bytes) -> dict[str, Any]:
    """The manifest (apiVersion, kind and the decoded fields) of a protobuf request body."""
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body (no k8s magic)")
    envelope = dict(fields(body[len(MAGIC) :]))
    type_meta, raw = envelope.get(1, b""), envelope.get(2, b"")
    if not isinstance(type_meta, bytes) or not isinstance(raw, bytes):
        raise ProtobufError("malformed runtime.Unknown envelope")
    tm = {n: v for n, v in fields(type_meta)}
    api_version = tm.get(1, b"")
    kind = tm.get(2, b"")
    if not isinstance(api_version, bytes) or not isinstance(kind, bytes):
        raise ProtobufError("malformed TypeMeta")
    kind_name = kind.decode()
    if kind_name not in _SCHEMAS:
        raise ProtobufError(f"protobuf bodies of kind {kind_name!r} are not supported: send JSON")
    return {"apiVersion": api_version.decode(), "kind": kind_name, **_message(raw, kind_name)}
