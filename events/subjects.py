"""Aggregate subjects: ``<root>.ev.<Kind>.<namespace>.<name>``, ``_`` for cluster-scoped kinds.

NATS splits subjects on ``.``, and Kubernetes names may contain dots, so inside a token ``.`` is
written as ``~`` (never legal in a Kubernetes name, so the mapping is reversible). ``root`` is
``draflow`` in a deployment; tests use their own root so many streams can share one server.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "CLUSTER",
    "DEFAULT_ROOT",
    "AggregateRef",
    "aggregate_subject",
    "decode_token",
    "dlq_subjects",
    "encode_token",
    "events_prefix",
    "parse_subject",
]

DEFAULT_ROOT = "draflow"
CLUSTER = "_"
_FORBIDDEN = frozenset(" \t\r\n*>~")


class AggregateRef(NamedTuple):
    kind: str
    namespace: str | None  # None for cluster-scoped aggregates
    name: str


def encode_token(value: str) -> str:
    """One subject token for a Kubernetes name (or kind, or namespace)."""
    if not value:
        raise ValueError("subject token: must not be empty")
    bad = _FORBIDDEN.intersection(value)
    if bad:
        raise ValueError(f"subject token {value!r}: must not contain {''.join(sorted(bad))!r}")
    return value.replace(".", "~")


def decode_token(token: str) -> str:
    return token.replace("~", ".")


def events_prefix(root: str = DEFAULT_ROOT) -> str:
    return f"{root}.ev"


def stored_prefix(root: str = DEFAULT_ROOT) -> str:
    """Where the event stream republishes every event once it is stored (``<root>.st.<Kind>...``,
    with its stream sequence in ``Nats-Sequence``): what log followers subscribe to."""
    return f"{root}.st"


def dlq_subjects(root: str = DEFAULT_ROOT) -> str:
    return f"{root}.dlq.>"


def aggregate_subject(kind: str, namespace: str | None, name: str, root: str = DEFAULT_ROOT) -> str:
    ns = CLUSTER if namespace in (None, "") else encode_token(namespace)
    return f"{root}.ev.{encode_token(kind)}.{ns}.{encode_token(name)}"


def parse_subject(subject: str, root: str = DEFAULT_ROOT) -> AggregateRef:
    """The aggregate a subject addresses (the inverse of :func:`aggregate_subject`)."""
    prefix = f"{root}.ev."
    if not subject.startswith(prefix):
        raise ValueError(f"subject {subject!r}: not under {prefix}")
    parts = subject[len(prefix) :].split(".")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"subject {subject!r}: expected {prefix}<Kind>.<namespace>.<name>")
    kind, ns, name = parts
    return AggregateRef(decode_token(kind), None if ns == CLUSTER else decode_token(ns), decode_token(name))
