"""Classic DRA (KEP-3063) through a real apiserver and the CLI: the seed's documents go in and
come back as written; classic validation errors are 422s naming the field."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.runtime.client import ApiClient
from services.runtime.protocol import StatusError
from tests.cli.conftest import Result, ThreadedApiServer

Draflow = Callable[..., Result]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "classic"
RC, POD = EXAMPLES / "acme-gpu-resourceclass.yaml", EXAMPLES / "device-consumer-pod.yaml"

CLAIM = """\
apiVersion: cdi.k8s.io/v1alpha1
kind: ResourceClaim
metadata:
  name: gpu
spec:
  resourceClassName: acme-gpu
  parameters:
    memory: 2Gi
"""


def _written(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict)
    return doc


def _contains(got: Any, written: Any, path: str = "") -> None:
    """Every field written is shown with the same value (the server adds metadata and defaults)."""
    if isinstance(written, dict):
        assert isinstance(got, dict), path
        for key, value in written.items():
            assert key in got, f"{path}.{key} missing"
            _contains(got[key], value, f"{path}.{key}")
    elif isinstance(written, list):
        assert isinstance(got, list) and len(got) == len(written), path
        for i, (g, w) in enumerate(zip(got, written, strict=True)):
            _contains(g, w, f"{path}[{i}]")
    else:
        assert got == written, f"{path}: {got!r} != {written!r}"


def test_seed_documents_round_trip(draflow: Draflow) -> None:
    res = draflow("apply", "-f", RC, "-f", POD)
    assert res.code == 0, res.err
    assert res.out.splitlines() == [
        "resourceclass.cdi.k8s.io/acme-gpu created",
        "pod/device-consumer created",
    ]

    rc = yaml.safe_load(draflow("get", "resourceclasses", "acme-gpu", "-o", "yaml").out)
    meta = {
        k: v for k, v in rc["metadata"].items() if k not in ("uid", "resourceVersion", "creationTimestamp")
    }
    assert {**rc, "metadata": meta} == {
        **_written(RC),
        "kind": "ResourceClass",
        "metadata": {"name": "acme-gpu", "generation": 1},
    }

    pod = yaml.safe_load(draflow("get", "pod", "device-consumer", "-o", "yaml").out)
    _contains(pod, _written(POD))  # KEP shape: string claims, inline template with flat fields
    assert "annotations" not in pod["metadata"]
    assert pod["spec"]["containers"][1]["resources"]["claims"] == ["gpu"]
    described = draflow("describe", "pod", "device-consumer").out
    assert "Resource Claims:" in described and "Resource Class Name:  acme-gpu" in described

    again = draflow("apply", "-f", RC, "-f", POD)
    assert again.out.splitlines() == [
        "resourceclass.cdi.k8s.io/acme-gpu unchanged",
        "pod/device-consumer unchanged",
    ]


def test_classic_claim_kinds_and_names(draflow: Draflow) -> None:
    assert draflow("apply", "-f", RC).code == 0
    res = draflow("apply", "-f", "-", stdin=CLAIM)
    assert res.out == "resourceclaim.cdi.k8s.io/gpu created\n", res.err
    shown = yaml.safe_load(draflow("get", "resourceclaims.cdi.k8s.io", "gpu", "-o", "yaml").out)
    assert (shown["apiVersion"], shown["kind"]) == ("cdi.k8s.io/v1alpha1", "ResourceClaim")
    assert shown["spec"] == {
        "resourceClassName": "acme-gpu",
        "parameters": {"memory": "2Gi"},
        "allocationMode": "Delayed",
    }
    assert shown["status"] == {"phase": "Pending", "userLimit": 1}
    assert draflow("get", "resourceclaims.cdi.k8s.io", "-o", "name").out == "resourceclaim.cdi.k8s.io/gpu\n"
    listed = yaml.safe_load(draflow("get", "resourceclaim.cdi.k8s.io", "-o", "yaml").out)
    assert [i["kind"] for i in listed["items"]] == ["ResourceClaim"]
    # the bare plural still means resource.k8s.io's claims
    none = draflow("get", "resourceclaims")
    assert none.out == "" and "No resources found" in none.err
    assert draflow("get", "resourceclasses").out.split()[:5] == [
        "NAME",
        "DRIVERNAME",
        "AGE",
        "acme-gpu",
        "gpu.acme.com",
    ]
    table = draflow("get", "resourceclaims.cdi.k8s.io").out.splitlines()
    assert table[0].split() == ["NAME", "RESOURCECLASSNAME", "ALLOCATIONMODE", "STATE", "AGE"]
    assert table[1].split()[:4] == ["gpu", "acme-gpu", "Delayed", "pending"]
    assert "Kind:         ResourceClaim" in draflow("describe", "resourceclaims.cdi.k8s.io", "gpu").out


def test_validation_errors_are_422_with_the_field(draflow: Draflow) -> None:
    bad = CLAIM.replace("  parameters:\n    memory: 2Gi\n", "  allocationMode: Later\n")
    res = draflow("apply", "-f", "-", stdin=bad)
    assert res.code == 1
    assert res.err.strip() == (
        'Error from server (Invalid): error when creating "STDIN": ResourceClaim.cdi.k8s.io "default/gpu" is '
        'invalid: spec.allocationMode: Unsupported value: "Later": supported values: "Delayed", "Immediate"'
    )
    assert draflow("apply", "-f", "-", stdin=CLAIM).code == 0
    changed = draflow("apply", "-f", "-", stdin=CLAIM.replace("2Gi", "4Gi"))
    assert "error when patching" in changed.err
    assert "spec: Invalid value: field is immutable" in changed.err
    pod = POD.read_text().replace('      - "gpu"\n', '      - "nope"\n')
    res = draflow("apply", "-f", "-", stdin=pod)
    assert res.code == 1
    assert 'Pod "default/device-consumer" is invalid: [spec.containers[0].resources.claims[0]: ' in res.err
    assert (
        'spec.containers[1].resources.claims[0]: Unsupported value: "nope": supported values: "gpu"]'
        in res.err
    )
    kindless = "apiVersion: cdi.k8s.io/v1alpha1\nmetadata: {name: x}\n"
    res = draflow("apply", "-f", "-", stdin=kindless)
    assert res.code == 1 and "kind not set (cannot infer it" in res.err


def test_status_writes_are_validated(system: ThreadedApiServer, draflow: Draflow) -> None:
    assert draflow("apply", "-f", RC, "-f", "-", stdin=CLAIM).code == 0

    async def write(api: ApiClient) -> None:
        claim = await api.get("resourceclaims.cdi.k8s.io", "gpu", namespace="default")
        rv = claim["metadata"]["resourceVersion"]
        with pytest.raises(StatusError) as err:
            await api.update_status(
                "resourceclaims.cdi.k8s.io",
                "gpu",
                {"phase": "Pending", "userLimit": 0},
                namespace="default",
                resource_version=rv,
            )
        assert err.value.status.code == 422
        assert [c.field for c in err.value.status.causes] == ["status.userLimit"]
        status = {
            "phase": "Allocated",
            "driverName": "gpu.acme.com",
            "userLimit": 1,
            "attributes": {"gpu": "gpu-0"},
        }
        done = await api.update_status(
            "resourceclaims.cdi.k8s.io", "gpu", status, namespace="default", resource_version=rv
        )
        assert done is not None and done["status"]["phase"] == "Allocated"

    system.call(write)
    row = draflow("get", "resourceclaims.cdi.k8s.io", "gpu", "-o", "wide").out.splitlines()[1].split()
    assert row[3] == "allocated"


def test_delete_the_seed_documents(draflow: Draflow) -> None:
    assert draflow("apply", "-f", RC, "-f", POD, "-f", "-", stdin=CLAIM).code == 0
    res = draflow("delete", "resourceclaims.cdi.k8s.io", "gpu")
    assert res.out == 'resourceclaim.cdi.k8s.io "gpu" deleted\n', res.err
    res = draflow("delete", "-f", RC, "-f", POD)
    assert res.out.splitlines() == [
        'resourceclass.cdi.k8s.io "acme-gpu" deleted',
        'pod "device-consumer" deleted',
    ], res.err
    assert "No resources found" in draflow("get", "resourceclasses").err


DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: gpu-app
spec:
  replicas: 1
  selector:
    matchLabels: {app: gpu-app}
  template:
    metadata:
      labels: {app: gpu-app}
    spec:
      resourceClaims:
      - name: gpu
        template:
          resourceClassName: acme-gpu
          parameters: {memory: 2Gi}
      containers:
      - name: workload
        image: my-app
        resources:
          claims: ["CLAIM"]
"""


def test_kep_pod_templates_of_workloads_are_validated(draflow: Draflow) -> None:
    res = draflow("apply", "-f", "-", stdin=DEPLOYMENT.replace("CLAIM", "nope"))
    assert res.code == 1
    assert res.err.strip() == (
        'Error from server (Invalid): error when creating "STDIN": '
        'Deployment.apps "default/gpu-app" is invalid: '
        "spec.template.spec.containers[0].resources.claims[0]: "
        'Unsupported value: "nope": supported values: "gpu"'
    )
    res = draflow("apply", "-f", "-", stdin=DEPLOYMENT.replace("CLAIM", "gpu"))
    assert res.out == "deployment.apps/gpu-app created\n", res.err
    # shown as stored: the template keeps its annotation form (encode_classic handles Pods only)
    shown = yaml.safe_load(draflow("get", "deploy", "gpu-app", "-o", "yaml").out)
    annotations = shown["spec"]["template"]["metadata"]["annotations"]
    assert list(annotations) == ["cdi.k8s.io/pod-resources"]
