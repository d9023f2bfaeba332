"""``draflow delete`` and ``get -o json|yaml`` as kubectl (issue 13 items 4, 5, 6 and 10).

A real apiserver on a real nats-server; the garbage collector service runs in the apiserver's
event loop where a test needs one (``collector``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.eventstore import EventStore
from services.cli.waiting import Progress, parse_duration
from services.garbage_collector.service import GarbageCollectorService
from services.runtime.controller import Runtime
from tests.cli.conftest import Result, ThreadedApiServer
from tests.helpers import wait_until

Draflow = Callable[..., Result]
FPGA = Path(__file__).resolve().parents[2] / "examples" / "classic" / "fpga-immediate-claim.yaml"
EMPTY_LIST = {"apiVersion": "v1", "items": [], "kind": "List", "metadata": {"resourceVersion": ""}}


@pytest.fixture
def collector(system: ThreadedApiServer) -> Iterator[None]:
    """The garbage collector service, in the apiserver thread's loop."""

    async def start() -> tuple[Runtime, EventStore, asyncio.Event, asyncio.Task[None]]:
        events = await EventStore.open(system.settings, "garbage-collector")
        rt = Runtime(events, actor="garbage-collector")
        await rt.start()
        stop = asyncio.Event()
        task = asyncio.create_task(rt.run(stop, GarbageCollectorService(rt).sync))
        return rt, events, stop, task

    rt, events, stop, task = asyncio.run_coroutine_threadsafe(start(), system.loop).result(30)
    try:
        yield
    finally:

        async def halt() -> None:
            stop.set()
            await task
            await rt.stop()
            await events.close()

        asyncio.run_coroutine_threadsafe(halt(), system.loop).result(30)


def _get(draflow: Draflow, *args: str) -> Any:
    res = draflow("get", *args, "-o", "json")
    assert res.code == 0, res.err
    return json.loads(res.out)


def _node_and_slice(draflow: Draflow, node: str) -> None:
    assert (
        draflow("apply", "-f", "-", stdin=f"apiVersion: v1\nkind: Node\nmetadata: {{name: {node}}}\n").code
        == 0
    )
    uid = _get(draflow, "node", node)["metadata"]["uid"]
    slice_doc = f"""
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: {node}-gpu.nvidia.com
  ownerReferences: [{{apiVersion: v1, kind: Node, name: {node}, uid: {uid}, blockOwnerDeletion: true}}]
spec:
  driver: gpu.nvidia.com
  nodeName: {node}
  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}
  devices: [{{name: gpu-0}}]
"""
    assert draflow("apply", "-f", "-", stdin=slice_doc).code == 0


# -- item 10: -o json|yaml of nothing ----------------------------------------------------------------


def test_json_and_yaml_of_nothing_is_an_empty_list(draflow: Draflow) -> None:
    res = draflow("get", "resourceclaims", "-o", "json")
    assert res.code == 0 and json.loads(res.out) == EMPTY_LIST and res.err == ""
    res = draflow("get", "pods", "-A", "-o", "yaml")
    assert res.code == 0 and yaml.safe_load(res.out) == EMPTY_LIST and res.err == ""
    assert res.out == 'apiVersion: v1\nitems: []\nkind: List\nmetadata:\n  resourceVersion: ""\n'
    res = draflow("get", "rc,pods", "-l", "app=none", "-o", "json")
    assert json.loads(res.out) == EMPTY_LIST and res.err == ""
    assert draflow("get", "pods", "-o", "name") == (0, "", "")
    # tables keep kubectl's message, on stderr only
    assert draflow("get", "pods") == (0, "", "No resources found in default namespace.\n")
    # one name asked for and missing: its error, no List
    missing = draflow("get", "pod", "nope", "-o", "json")
    assert missing.code == 1 and missing.out == "" and "not found" in missing.err


# -- item 5: delete -f resolves each document's own group ----------------------------------------


def test_delete_f_uses_each_documents_api_version(draflow: Draflow) -> None:
    assert draflow("apply", "-f", FPGA).code == 0
    res = draflow("delete", "-f", FPGA)
    assert res.code == 0, res.err
    assert res.out.splitlines() == [
        'resourceclaim.cdi.k8s.io "aes-accelerator" deleted',
        'pod "encryptor" deleted',
    ]
    assert json.loads(draflow("get", "resourceclaims.cdi.k8s.io", "-o", "json").out)["items"] == []
    # a kind in a version draflow does not serve is named with that version
    bad = draflow(
        "delete", "-f", "-", stdin="apiVersion: cdi.k8s.io/v9\nkind: ResourceClaim\nmetadata: {name: x}\n"
    )
    assert bad.code == 1 and 'no matches for kind "ResourceClaim" in version "cdi.k8s.io/v9"' in bad.err


# -- item 4 through the CLI: --cascade ---------------------------------------------------------------


def test_cascade_background_orphan_foreground(draflow: Draflow, collector: None) -> None:
    _node_and_slice(draflow, "gh200-1")
    res = draflow("delete", "node", "gh200-1")  # --cascade=background is the default
    assert res == (0, 'node "gh200-1" deleted\n', "")
    wait_until(lambda: draflow("get", "resourceslices", "-o", "name").out == "", timeout_s=15)

    _node_and_slice(draflow, "gh200-2")
    res = draflow("delete", "node", "gh200-2", "--cascade=orphan")
    assert res == (0, 'node "gh200-2" deleted\n', "")  # --wait: the node is gone when it returns
    kept = _get(draflow, "resourceslice", "gh200-2-gpu.nvidia.com")
    assert "ownerReferences" not in kept["metadata"] and "deletionTimestamp" not in kept["metadata"]

    _node_and_slice(draflow, "gh200-3")
    res = draflow("delete", "node", "gh200-3", "--cascade=foreground")
    assert res == (0, 'node "gh200-3" deleted\n', "")
    # the node waited for its slice, so when delete returns the slice is gone too
    names = draflow("get", "resourceslices", "-o", "name").out.split()
    assert names == ["resourceslice.resource.k8s.io/gh200-2-gpu.nvidia.com"]


def test_cascade_values_as_kubectl(draflow: Draflow) -> None:
    bad = draflow("delete", "node", "x", "--cascade=sideways")
    assert bad == (
        1,
        "",
        'error: invalid cascade value (sideways). Must be "background", "foreground", or "orphan"\n',
    )
    old = draflow("delete", "node", "x", "--cascade=false")
    assert old.err.startswith(
        "warning: --cascade=false is deprecated (boolean value) and can be replaced with --cascade=orphan.\n"
    )


# -- item 6: deletion never hangs silently -----------------------------------------------------------


def test_a_held_deletion_times_out_and_says_what_it_waits_for(draflow: Draflow) -> None:
    stuck = """
apiVersion: v1
kind: Namespace
metadata: {name: dead-node}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: dead-node}
spec:
  nodeName: node-9
  containers: [{name: c, image: busybox}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: held, namespace: dead-node, finalizers: [example.com/hold]}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com}}]
"""
    assert draflow("apply", "-f", "-", stdin=stuck).code == 0
    started = time.monotonic()
    res = draflow("delete", "ns", "dead-node", "--timeout=2s")
    assert time.monotonic() - started < 10
    assert res.code == 1 and res.out == 'namespace "dead-node" deleted\n'
    lines = res.err.splitlines()
    assert lines[0] == "error: timed out waiting for the condition on namespaces/dead-node"
    assert lines[1].startswith("namespaces/dead-node is still there after 2s (--timeout): ")
    assert (
        "Some resources are remaining: pods has 1 resource instances, resourceclaims.resource.k8s.io has 1"
        in lines[1]
    )
    assert (
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
        in lines[1]
    )
    assert "pods waiting for their kubelet to confirm they stopped: p (node node-9)" in lines[1]

    res = draflow("delete", "pod", "p", "-n", "dead-node", "--timeout", "1")
    assert res.code == 1
    assert (
        'pods/p is still there after 1s (--timeout): the kubelet on node "node-9" has not confirmed the pod '
        "stopped (grace period 30s)"
    ) in res.err
    bad = draflow("delete", "pod", "p", "--timeout", "soon")
    assert bad.code == 1 and 'invalid argument "soon" for "--timeout" flag' in bad.err


def test_the_default_wait_gives_up_without_progress_and_reports_while_waiting() -> None:
    p = Progress(0.0, 0.0, idle_s=60.0)
    p.observe(0.0, ("3 pods",))
    assert not p.report_due(1.0, p.state)  # a short wait says nothing
    assert p.report_due(5.0, p.state)
    assert not p.report_due(9.0, p.state)  # the same again: not repeated
    p.observe(30.0, ("2 pods",))  # progress restarts the idle clock
    assert not p.expired(89.0) and p.expired(90.0)
    assert p.report_due(30.0, p.state)
    hard = Progress(0.0, 10.0)
    hard.observe(5.0, ("x",))
    assert not hard.expired(9.9) and hard.expired(10.0)
    assert p.limit_text() == "after 60s without progress (--timeout=0)"
    assert parse_duration("1m30s") == 90.0 and parse_duration("500ms") == 0.5 and parse_duration("2") == 2.0
