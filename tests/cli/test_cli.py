"""``draflow apply/get/describe/delete/events`` in-process against a running apiserver."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from services.runtime.client import ApiClient
from tests.cli.conftest import Result, ThreadedApiServer

Draflow = Callable[..., Result]

CLASS = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.example.com
spec:
  selectors:
  - cel:
      expression: device.driver == 'gpu.example.com'
"""
NS_AND_CLAIM = """\
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: gpu
  namespace: team-a
  labels: {app: train}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.example.com
"""
BAD = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: broken
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.example.com
        count: -1
---
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: cd
---
apiVersion: v1
kind: Pod
metadata:
  name: lower
spec:
  restartpolicy: Never
---
kind: [unclosed
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: elsewhere
  namespace: nowhere
spec: {}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: fine.example.com
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_apply_prints_created_configured_unchanged(draflow: Draflow, tmp_path: Path) -> None:
    f = write(tmp_path, "all.yaml", CLASS + "---\n" + NS_AND_CLAIM)
    first = draflow("apply", "-f", f)
    assert first == (
        0,
        "deviceclass.resource.k8s.io/gpu.example.com created\nnamespace/team-a created\n"
        "resourceclaim.resource.k8s.io/gpu created\n",
        "",
    )
    again = draflow("apply", "-f", f)
    assert again.out.split("\n")[:3] == [
        "deviceclass.resource.k8s.io/gpu.example.com unchanged",
        "namespace/team-a unchanged",
        "resourceclaim.resource.k8s.io/gpu unchanged",
    ]
    f.write_text(CLASS + "---\n" + NS_AND_CLAIM.replace("app: train", "app: serve"))
    assert "resourceclaim.resource.k8s.io/gpu configured" in draflow("apply", "-f", f).out


def test_apply_reports_each_refusal_like_kubectl(draflow: Draflow, tmp_path: Path) -> None:
    f = write(tmp_path, "bad.yaml", BAD)
    res = draflow("apply", "-f", f)
    assert res.code == 1
    assert res.out == "deviceclass.resource.k8s.io/fine.example.com created\n"
    lines = res.err.splitlines()
    assert lines[0] == (
        f'Error from server (Invalid): error when creating "{f}": '
        'ResourceClaim.resource.k8s.io "default/broken" is invalid: '
        "spec.devices.requests[0].exactly.count: Invalid value: -1: must be greater than zero"
    )
    assert lines[1] == (
        f'error: resource mapping not found for name: "cd" namespace: "" from "{f}": '
        'no matches for kind "ComputeDomain" in version "resource.nvidia.com/v1beta1"'
    )
    assert lines[2] == "ensure CRDs are installed first"
    assert lines[3].startswith(
        f'Error from server (BadRequest): error when creating "{f}": '
        'Pod "default/lower" in version "v1" cannot be handled as a Pod: '
    )
    assert 'unknown field "spec.restartpolicy"' in lines[3]
    assert lines[4].startswith(f"error: error parsing {f}: error parsing YAML: line ")
    assert (
        lines[5] == f'Error from server (NotFound): error when creating "{f}": namespaces "nowhere" not found'
    )


def test_apply_directories_stdin_lists_and_json(draflow: Draflow, tmp_path: Path) -> None:
    write(tmp_path, "d/class.yaml", CLASS)
    write(tmp_path, "d/README.md", "not a manifest")
    write(
        tmp_path,
        "d/sub/ns.json",
        json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "j"}}),
    )
    flat = draflow("apply", "-f", tmp_path / "d")
    assert flat.out == "deviceclass.resource.k8s.io/gpu.example.com created\n"
    deep = draflow("apply", "-R", "-f", tmp_path / "d")
    assert deep.out.splitlines() == [
        "deviceclass.resource.k8s.io/gpu.example.com unchanged",
        "namespace/j created",
    ]
    wrapped = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [yaml.safe_load(CLASS) | {"metadata": {"name": "x.io"}}],
    }
    res = draflow("apply", "-f", "-", stdin=yaml.safe_dump(wrapped))
    assert res == (0, "deviceclass.resource.k8s.io/x.io created\n", "")
    missing = draflow("apply", "-f", tmp_path / "nope.yaml")
    assert missing.code == 1 and missing.err == f'error: the path "{tmp_path / "nope.yaml"}" does not exist\n'


def test_get_tables_names_and_formats(draflow: Draflow, tmp_path: Path) -> None:
    draflow("apply", "-f", write(tmp_path, "a.yaml", CLASS + "---\n" + NS_AND_CLAIM))
    table = draflow("get", "resourceclaims", "-n", "team-a")
    assert re.fullmatch(r"NAME   STATE     AGE\ngpu    pending   \d+s\n", table.out), table.out
    for spelling in ("resourceclaim", "ResourceClaim", "rc", "resourceclaims.resource.k8s.io"):
        assert draflow("get", spelling, "gpu", "-n", "team-a").out == table.out
    assert draflow("get", "rc/gpu", "-n", "team-a", "-o", "name").out == "resourceclaim.resource.k8s.io/gpu\n"
    wide = draflow("get", "rc", "-A", "-o", "wide").out.splitlines()
    assert wide[0].split() == ["NAMESPACE", "NAME", "STATE", "AGE", "DEVICES"]
    assert wide[1].split()[:3] == ["team-a", "gpu", "pending"]
    doc = yaml.safe_load(draflow("get", "rc", "gpu", "-n", "team-a", "-o", "yaml").out)
    assert doc["kind"] == "ResourceClaim" and doc["apiVersion"] == "resource.k8s.io/v1"
    assert {"uid", "resourceVersion", "creationTimestamp", "generation"} <= set(doc["metadata"])
    assert doc["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
    listed = json.loads(draflow("get", "deviceclasses", "-o", "json").out)
    assert listed["kind"] == "List" and [i["metadata"]["name"] for i in listed["items"]] == [
        "gpu.example.com"
    ]
    assert (
        draflow("get", "rc", "-A", "-l", "app=train", "-o", "name").out
        == "resourceclaim.resource.k8s.io/gpu\n"
    )
    assert draflow("get", "rc", "-A", "-l", "app=other").err == "No resources found\n"
    assert draflow("get", "rc").err == "No resources found in default namespace.\n"
    both = draflow("get", "deviceclass,ns", "-o", "name").out.splitlines()
    assert "deviceclass.resource.k8s.io/gpu.example.com" in both and "namespace/team-a" in both


def test_get_errors(draflow: Draflow) -> None:
    missing = draflow("get", "rc", "nope")
    assert missing == (
        1,
        "",
        'Error from server (NotFound): resourceclaims.resource.k8s.io "nope" not found\n',
    )
    assert draflow("get", "rc", "nope", "--ignore-not-found") == (0, "", "")
    unknown = draflow("get", "computedomains")
    assert unknown == (1, "", 'error: the server doesn\'t have a resource type "computedomains"\n')
    bad_selector = draflow("get", "rc", "-l", "a in ()")
    assert bad_selector.code == 1 and bad_selector.err.startswith(
        "Error from server (BadRequest): couldn't parse"
    )


def test_describe_shows_status_and_events(
    draflow: Draflow, system: ThreadedApiServer, tmp_path: Path
) -> None:
    draflow("apply", "-f", write(tmp_path, "a.yaml", CLASS + "---\n" + NS_AND_CLAIM))

    async def record(api: ApiClient) -> Any:
        for _ in range(2):
            await api.record_event(
                "ResourceClaim",
                "gpu",
                "Allocated",
                "gpu-0 on node-1",
                namespace="team-a",
                component="scheduler",
            )
        return await api.record_event(
            "ResourceClaim", "gpu", "Waiting", "no node fits", namespace="team-a", type_="Warning"
        )

    system.call(record)
    out = draflow("describe", "resourceclaim", "gpu", "-n", "team-a").out
    assert out.startswith(
        "Name:         gpu\nNamespace:    team-a\nLabels:       app=train\nAnnotations:  <none>\n"
    )
    assert "API Version:  resource.k8s.io/v1\nKind:         ResourceClaim\n" in out
    assert re.search(r"\n        Device Class Name:  gpu.example.com\n", out), out
    events = out[out.index("Events:") :].splitlines()
    assert events[1].split() == ["Type", "Reason", "Age", "From", "Message"]
    assert re.match(r"  Normal   Allocated  \d+s \(x2 over \d+s\)  scheduler  gpu-0 on node-1", events[3]), (
        events
    )
    assert re.match(r"  Warning  Waiting    \d+s\s+draflow\s+no node fits", events[4]), events
    listed = draflow("events", "-n", "team-a").out.splitlines()
    assert listed[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert "ResourceClaim/gpu" in listed[1]
    assert len(draflow("events", "-A", "--types", "Warning").out.splitlines()) == 2
    assert (
        draflow("events", "--for", "rc/other", "-n", "team-a").err == "No events found in team-a namespace.\n"
    )
    assert draflow("describe", "deviceclass", "gpu.example.com").out.endswith("Events:  <none>\n")


def test_delete_by_name_file_and_selector(
    draflow: Draflow, system: ThreadedApiServer, tmp_path: Path
) -> None:
    held = NS_AND_CLAIM.replace("labels: {app: train}", "finalizers: [example.com/hold]")
    f = write(tmp_path, "a.yaml", CLASS + "---\n" + held)
    draflow("apply", "-f", f)
    res = draflow("delete", "rc", "gpu", "-n", "team-a", "--wait=false")
    assert res == (0, 'resourceclaim.resource.k8s.io "gpu" deleted\n', "")
    assert draflow("get", "rc", "-n", "team-a", "--no-headers").out.split()[:2] == ["gpu", "deleted"]
    system.call(
        lambda api: api.finalize("ResourceClaim", "gpu", namespace="team-a", remove=["example.com/hold"])
    )
    assert draflow("get", "rc", "-n", "team-a").err == "No resources found in team-a namespace.\n"
    gone = draflow("delete", "-f", f)
    assert gone.code == 1
    assert 'deviceclass.resource.k8s.io "gpu.example.com" deleted' in gone.out
    assert 'namespace "team-a" deleted' in gone.out
    assert (
        f'Error from server (NotFound): error when deleting "{f}": '
        'resourceclaims.resource.k8s.io "gpu" not found' in gone.err
    )
    draflow("apply", "-f", write(tmp_path, "b.yaml", CLASS))
    assert (
        draflow("delete", "deviceclass", "--all").out
        == 'deviceclass.resource.k8s.io "gpu.example.com" deleted\n'
    )
    assert draflow("delete", "deviceclass").code == 1


def test_connection_problems_are_one_line(draflow: Draflow) -> None:
    res = draflow("get", "rc", "--server", "nats://127.0.0.1:1")
    assert res.code == 1 and res.err.startswith("error: cannot connect to nats://127.0.0.1:1")
    assert len(res.err.splitlines()) == 1
