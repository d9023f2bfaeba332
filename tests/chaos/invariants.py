"""What must hold once a chaos run has converged, checked on the objects and on each node's disk."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from draflow.services.kubelet.checkpoint import read_checkpoint
from tests.e2e.demo import claims_of

CLAIM_SPEC_PREFIX = "k8s.gpu.example.com-gpu_"


def cdi_claim_uids(data_dir: Path, node: str) -> set[str]:
    """Claims with a CDI spec of their own on ``node`` (the driver writes one per prepared claim)."""
    folder = data_dir / "cdi" / node
    uids = {p.name[len(CLAIM_SPEC_PREFIX) : -len(".json")] for p in folder.glob(f"{CLAIM_SPEC_PREFIX}*.json")}
    return uids - {"common"}  # the driver's spec for every container, not a claim's


def checkpoint_claim_uids(data_dir: Path, node: str) -> set[str]:
    return {info.claim_uid for info in read_checkpoint(data_dir / f"kubelet-{node}")}


def check(
    pods: Iterable[Any], claims: Iterable[Any], data_dir: Path, nodes: Iterable[str], dead_letters: int
) -> list[str]:
    """Every violation, as one line each (empty: the system is consistent)."""
    pods, claims = list(pods), list(claims)
    problems: list[str] = []
    uids = {p.metadata.uid for p in pods}
    booked: dict[tuple[str, str, str], str] = {}
    for c in claims:
        name = f"{c.metadata.namespace}/{c.metadata.name}"
        allocation = c.status.allocation
        for r in allocation.devices.results if allocation is not None else ():
            if r.admin_access:
                continue
            key = (r.driver, r.pool, r.device)
            if key in booked:
                problems.append(f"device {'/'.join(key)} allocated twice: {booked[key]} and {name}")
            booked[key] = name
        for ref in c.status.reserved_for:
            if ref.uid not in uids:
                problems.append(f"claim {name} reserved for pod {ref.name} ({ref.uid}), which is gone")
        for owner in c.metadata.owner_references:
            if owner.kind == "Pod" and owner.uid not in uids:
                problems.append(f"claim {name} left behind by deleted pod {owner.name}")
    for p in pods:
        if p.status.phase != "Running" or p.metadata.deletion_timestamp is not None:
            gone = " (terminating)" if p.metadata.deletion_timestamp is not None else ""
            problems.append(f"pod {p.metadata.namespace}/{p.metadata.name}: {p.status.phase}{gone}")
    by_key = {(c.metadata.namespace, c.metadata.name): c for c in claims}
    for node in nodes:
        expected = {
            c.metadata.uid
            for p in pods
            if p.spec.node_name == node and p.status.phase == "Running"
            for c in claims_of(p, by_key)
        }
        want = f"its running pods' claims are {sorted(expected)}"
        held = checkpoint_claim_uids(data_dir, node)
        if held != expected:
            problems.append(f"node {node}: checkpoint holds {sorted(held)}, {want}")
        specs = cdi_claim_uids(data_dir, node)
        if specs != expected:
            problems.append(f"node {node}: CDI specs for {sorted(specs)}, {want}")
    if dead_letters:
        problems.append(f"{dead_letters} dead letter(s)")
    return problems


def dlq_count(info: bytes) -> int:
    """Messages in the dead-letter stream, from its ``$JS.API.STREAM.INFO`` answer."""
    data = json.loads(info)
    if data.get("error"):
        raise AssertionError(f"dead-letter stream: {data['error']}")
    return int(data["state"]["messages"])
