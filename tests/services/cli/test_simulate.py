"""``draflow simulate`` from a real log: the JSON shape, node groups from a node and from a
template file, ``--pods`` (a Deployment expands to its pods, template claims get their claims),
``--remove-node``, exit codes, one-line errors for bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.services.cli.conftest import Result
from tests.services.cli.test_cli import write

pytestmark = pytest.mark.kep4381

Draflow = Callable[..., Result]


def _node(name: str, devices: int) -> str:
    devs = "".join(f"\n    - name: gpu-{i}" for i in range(devices))
    return f"""\
apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels: {{kubernetes.io/hostname: {name}}}
status:
  allocatable: {{cpu: "8", memory: 32Gi, pods: "110"}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: {name}-gpus
spec:
  driver: gpu.example.com
  nodeName: {name}
  pool: {{name: {name}, generation: 1, resourceSliceCount: 1}}
  devices:{devs}
"""


CLASS = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu
spec:
  selectors:
  - cel:
      expression: device.driver == 'gpu.example.com'
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: one-gpu
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu}
"""


def _pending(name: str) -> str:
    return f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: {name}-gpu
spec:
  devices:
    requests:
    - name: gpu
      exactly: {{deviceClassName: gpu}}
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: main
    image: busybox
    resources: {{claims: [{{name: gpu}}]}}
  resourceClaims:
  - name: gpu
    resourceClaimName: {name}-gpu
"""


DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer
spec:
  replicas: 3
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      containers:
      - name: main
        image: busybox
        resources: {claims: [{name: gpu}]}
      resourceClaims:
      - name: gpu
        resourceClaimTemplateName: one-gpu
"""


def _cluster(draflow: Draflow, tmp_path: Path) -> None:
    docs = [CLASS, _node("node-0", 1), _node("node-1", 2), _pending("p1"), _pending("p2"), _pending("p3")]
    res = draflow("apply", "-f", write(tmp_path, "cluster.yaml", "---\n".join(docs)))
    assert res.code == 0, res.err


def test_node_group_from_a_node_json_shape_and_exit_codes(draflow: Draflow, tmp_path: Path) -> None:
    _cluster(draflow, tmp_path)
    fits = draflow("simulate", "-o", "json")
    doc = json.loads(fits.out)
    assert fits.code == 0 and doc["fits"] is True
    assert list(doc) == ["asOfSeq", "pods", "nodeGroups", "removeNodes", "fits"]
    assert [p["name"] for p in doc["pods"]] == ["p1", "p2", "p3"]  # queue order: oldest first
    assert sorted(p["node"] for p in doc["pods"]) == ["node-0", "node-1", "node-1"]
    assert not any(p["newNode"] for p in doc["pods"])
    pod = doc["pods"][0]
    assert set(pod) >= {"namespace", "name", "node", "newNode", "nodeGroup", "devices", "reason"}
    assert pod["devices"][0]["driver"] == "gpu.example.com" and pod["reason"] is None

    more = write(tmp_path, "more.yaml", DEPLOYMENT)
    short = draflow("simulate", "--pods", more, "-o", "json")
    assert short.code == 1
    left = [p for p in json.loads(short.out)["pods"] if p["node"] is None]
    assert len(left) == 3 and all(p["name"].startswith("trainer-") for p in left)
    assert left[0]["reason"] == "0/2 nodes are available: 2 cannot allocate all claims."

    grown = draflow(
        "simulate", "--pods", more, "--node-group", "big=node-1:1", "--node-group", "small=node-0"
    )
    assert grown.code == 0, grown.out + grown.err
    lines = [" ".join(line.split()) for line in grown.out.splitlines()]
    assert lines[0].startswith("Simulated on the log at seq ")
    assert "big node-1 1 1" in lines and "small node-0 1 -" in lines
    assert lines[-1] == "6/6 pods fit, 2 new nodes."
    again = draflow(
        "simulate", "--pods", more, "--node-group", "big=node-1:1", "--node-group", "small=node-0"
    )
    assert again.out == grown.out  # same log position and inputs, same answer


TEMPLATE = """\
apiVersion: v1
kind: Node
metadata:
  name: template
  labels: {kubernetes.io/hostname: template, pool: a100}
status:
  allocatable: {cpu: "64", memory: 256Gi, pods: "110"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: template-gpus
spec:
  driver: gpu.example.com
  nodeName: template
  pool: {name: template, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
  - name: gpu-1
  - name: gpu-2
  - name: gpu-3
"""


def test_scale_from_zero_with_a_template_file_and_remove_node(draflow: Draflow, tmp_path: Path) -> None:
    docs = [CLASS, _node("node-0", 1), _pending("p1")]
    assert draflow("apply", "-f", write(tmp_path, "c.yaml", "---\n".join(docs))).code == 0
    template = write(tmp_path, "a100.yaml", TEMPLATE)
    more = write(tmp_path, "more.yaml", DEPLOYMENT)
    res = draflow("simulate", "--pods", more, "--node-group", f"a100={template}", "-o", "wide")
    assert res.code == 0, res.err
    lines = [" ".join(line.split()) for line in res.out.splitlines()]
    assert "default/p1 node-0 - gpu.example.com/node-0/gpu-0 -" in lines
    new = [line for line in lines if line.startswith("default/trainer-")]
    assert [line.split()[1:4] for line in new] == [
        ["a100-1", "a100", "gpu.example.com/a100-1/gpu-0"],
        ["a100-1", "a100", "gpu.example.com/a100-1/gpu-1"],
        ["a100-1", "a100", "gpu.example.com/a100-1/gpu-2"],
    ]
    # node-0 runs nothing yet (p1 is pending): it can go
    empty = json.loads(draflow("simulate", "--remove-node", "node-0", "-o", "json").out)
    assert empty["removeNodes"] == {"node-0": {"removable": True, "moves": []}}
    # a pod bound there has nowhere else to go
    assert draflow("apply", "-f", write(tmp_path, "runner.yaml", RUNNER)).code == 0
    gone = draflow("simulate", "--remove-node", "node-0", "-o", "json")
    assert gone.code == 1
    removal = json.loads(gone.out)["removeNodes"]["node-0"]
    assert removal["removable"] is False
    assert removal["moves"] == [
        {
            "namespace": "default",
            "name": "runner",
            "node": None,
            "devices": [],
            "reason": "no nodes available to schedule pods",
        }
    ]
    yaml_out = draflow("simulate", "--remove-node", "node-0", "-o", "yaml")
    assert "removable: false" in yaml_out.out


RUNNER = """\
apiVersion: v1
kind: Pod
metadata:
  name: runner
spec:
  nodeName: node-0
  containers:
  - name: main
    image: busybox
    resources: {requests: {cpu: "4"}}
"""
BAD_SLICE = TEMPLATE.replace("  - name: gpu-3\n", "  - name: GPU 3\n")
OTHER_NODE = TEMPLATE.replace("  nodeName: template\n", "  nodeName: elsewhere\n")


@pytest.mark.parametrize(
    ("args", "files", "message"),
    [
        (["--remove-node", "nope"], {}, "error: --remove-node: node 'nope' not found\n"),
        (["--node-group", "gpu=nope"], {}, "error: --node-group gpu=nope: no node or file named 'nope'\n"),
        (["--node-group", "gpu"], {}, "error: --node-group gpu: expected NAME=NODE|FILE[:MAX]\n"),
        (["--node-group", "gpu=node-0:0"], {}, "error: --node-group gpu=node-0:0: MAX must be at least 1\n"),
        (
            ["--node-group", "node=node-0"],
            {},
            "error: --node-group node=node-0: node node-0 exists already; choose another group name\n",
        ),
        (
            ["--node-group", "g=T"],
            {"T": TEMPLATE + "---\n" + TEMPLATE.split("---\n")[0]},
            "error: T: a node template holds exactly one Node, found 2\n",
        ),
        (
            ["--node-group", "g=T"],
            {"T": BAD_SLICE},
            "error: T: ResourceSlice template-gpus: spec.devices[3].name: Invalid value: "
            '"GPU 3": a lowercase RFC 1123 label must consist of lower case alphanumeric characters '
            "or '-', and must start and end with an alphanumeric character "
            "(e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')\n",
        ),
        (
            ["--node-group", "g=T"],
            {"T": OTHER_NODE},
            'error: T: ResourceSlice template-gpus: spec.nodeName: Invalid value: "elsewhere": '
            'must be the template node\'s name "template"\n',
        ),
        (
            ["--pods", "T"],
            {"T": TEMPLATE},
            "error: T: Node template: --pods takes Pods, Deployments, Jobs, "
            "ResourceClaims and ResourceClaimTemplates\n",
        ),
        (["--as-of-seq", "999999"], {}, None),
    ],
)
def test_bad_input_is_one_clear_line(
    draflow: Draflow, tmp_path: Path, args: list[str], files: dict[str, str], message: str | None
) -> None:
    assert (
        draflow("apply", "-f", write(tmp_path, "c.yaml", "---\n".join([CLASS, _node("node-0", 1)]))).code == 0
    )
    paths = {name: str(write(tmp_path, name, text)) for name, text in files.items()}
    real = [paths.get(a, a.replace("=T", f"={paths.get('T')}")) for a in args]
    res = draflow("simulate", *real)
    assert res.code == 1 and res.out == ""
    assert len(res.err.splitlines()) == 1
    if message is not None:
        expected = message
        for name, path in paths.items():
            expected = expected.replace(f" {name}: ", f" {path}: ").replace(f"={name}:", f"={path}:")
        assert res.err == expected
    else:
        assert res.err.startswith("error: --as-of-seq: 999999 is past the end of the log")
