"""``draflow simulate`` with numeric parameters (KEP-4381) on a real log: the examples' CRD,
ClaimParameters and frobnicator class applied through the apiserver, nodes publishing
NodeResourceCapacity, pending pods with numeric claims; node groups from an existing node (its
capacity cloned) and from a template file holding a NodeResourceCapacity."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.builders.numeric import FROB_API, FROB_DRIVER, kep_pod, node_capacity, numeric_claim
from tests.paths import EXAMPLES
from tests.services.cli.conftest import Result
from tests.services.cli.test_cli import write

pytestmark = pytest.mark.kep4381

Draflow = Callable[..., Result]


def _node(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def _cluster(draflow: Draflow, tmp_path: Path) -> None:
    """Two nodes of 4 frobnicators; five pending pods asking for 3 each (one fits per node)."""
    docs: list[object] = [
        {
            "apiVersion": FROB_API,
            "kind": "ClaimParameters",
            "metadata": {"name": "three", "namespace": "default"},
            "spec": {"numberOfFrobnicators": 3},
        }
    ]
    for node in ("node-0", "node-1"):
        docs += [_node(node), node_capacity(node, 4)]
    for i in range(5):
        docs += [numeric_claim(f"p{i}-frob", "three", cls="frobnicator"), kep_pod(f"p{i}", f"p{i}-frob")]
    crd = draflow("apply", "-f", EXAMPLES / "numeric" / "claim-parameters-crd.yaml")
    assert crd.code == 0, crd.err
    cls = draflow("apply", "-f", EXAMPLES / "numeric" / "class.yaml")
    assert cls.code == 0, cls.err
    res = draflow("apply", "-f", write(tmp_path, "cluster.yaml", yaml.safe_dump_all(docs)))
    assert res.code == 0, res.err


TEMPLATE = f"""\
apiVersion: v1
kind: Node
metadata:
  name: big
  labels: {{kubernetes.io/hostname: big}}
status:
  allocatable: {{cpu: "64", memory: 256Gi, pods: "110"}}
---
apiVersion: resource.k8s.io/v1alpha2
kind: NodeResourceCapacity
metadata:
  name: big-frobnicators
nodeName: big
driverName: {FROB_DRIVER}
instances:
- id: frob-0
  apiVersion: counter.dra.config.k8s.io/v1alpha1
  kind: Capacity
  data: {{count: 8}}
"""


def test_numeric_pods_scale_up_from_a_node_and_from_a_template(draflow: Draflow, tmp_path: Path) -> None:
    _cluster(draflow, tmp_path)
    short = draflow("simulate", "-o", "json")
    assert short.code == 1, short.err
    doc = json.loads(short.out)
    placed = [(p["name"], p["node"]) for p in doc["pods"]]
    assert sorted(n for _, n in placed if n) == ["node-0", "node-1"]
    left = [p for p in doc["pods"] if p["node"] is None]
    assert len(left) == 3
    assert left[0]["reason"] == "0/2 nodes are available: 2 insufficient counter capacity: 3 required."
    first = next(p for p in doc["pods"] if p["node"])
    assert first["devices"] == [
        {
            "claim": f"{first['name']}-frob",
            "request": "frob",
            "driver": FROB_DRIVER,
            "pool": first["node"],
            "device": "frob-0",
            "adminAccess": False,
        }
    ]

    like_node = json.loads(draflow("simulate", "--node-group", "small=node-0", "-o", "json").out)
    assert like_node["fits"] is True
    assert like_node["nodeGroups"]["small"]["newNodes"] == 3  # 4 frobnicators: one pod each

    template = write(tmp_path, "big.yaml", TEMPLATE)
    grown = draflow("simulate", "--node-group", f"big={template}", "-o", "wide")
    assert grown.code == 0, grown.out + grown.err
    lines = [" ".join(line.split()) for line in grown.out.splitlines()]
    assert f"big {template} 2 - big-1, big-2" in lines  # 8 frobnicators: two pods a node
    assert lines[-1] == "5/5 pods fit, 2 new nodes."
    again = draflow("simulate", "--node-group", f"big={template}", "-o", "wide")
    assert again.out == grown.out

    wrong = write(tmp_path, "wrong.yaml", TEMPLATE.replace("nodeName: big", "nodeName: other"))
    bad = draflow("simulate", "--node-group", f"big={wrong}")
    assert bad.code == 1 and bad.out == ""
    assert bad.err.strip().endswith(
        'NodeResourceCapacity big-frobnicators: nodeName: Invalid value: "other": '
        'must be the template node\'s name "big"'
    )
    # nothing was appended by simulating: the log still shows five pending pods
    assert json.loads(draflow("simulate", "-o", "json").out)["asOfSeq"] == doc["asOfSeq"]
